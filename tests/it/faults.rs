//! Every dependency has a deadline: each dependency of the mirror (a registry origin, the object
//! store, a release host, an OpenID Connect issuer, a centre) put behind the fault-injection
//! proxy ([`Throttle`]) and made to refuse, hang (accept and never answer), stall mid-stream,
//! trickle or reset. For each, with short deadlines (1-2 s): what is cached is still served at
//! once, what truly needs the dependency is a 503/504 JSON error with `Retry-After` within its
//! bound, nothing half-written is kept, and the mirror recovers by itself when the fault ends.
//! The table in the guide's "Under load and when things fail" (docs/src/operations/failures.md)
//! names these tests.

use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::support::garage::Garage;
use crate::support::http::{Got, get, send_lenient};
use crate::support::origin::{FakeOrigin, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::throttle::{Fault as Net, Throttle};
use crate::support::{https_client, poll};

const MIB: usize = 1 << 20;

/// The origin's deadlines in these tests: a call gives up after 1 s, no retries, and two
/// failures open a host's circuit for 1 s.
const SHORT_UPSTREAM: &str = "connect_timeout = \"1s\"\nrequest_timeout = \"1s\"\n\
    idle_timeout = \"1s\"\nretries = 0\nbreaker_failures = 2\nbreaker_cooldown = \"1s\"";

/// Every client request's budget and the readiness check's deadline in these tests.
const SHORT_SERVER: &str = "request_budget = \"2s\"\nready_timeout = \"1s\"";

/// The object store's deadlines in these tests (keys of `[cache.object_store]`): a call within
/// 2 s (a busy machine's Garage can take one), a body's chunks within 1 s; one call that
/// fails opens the circuit for 3 s: long enough that a test's next requests, on a busy
/// machine, still meet the open circuit rather than its half-open probe (a background call
/// that hung meanwhile, such as a `touch`, opens it again).
const SHORT_STORE: &str = "connect_timeout = \"1s\"\nrequest_timeout = \"2s\"\n\
    idle_timeout = \"1s\"\nretries = 1\nbreaker_failures = 1\nbreaker_cooldown = \"3s\"\n";

/// What "at once" means for an answer from memory or the local disk, with room for a busy
/// machine.
const AT_ONCE: Duration = Duration::from_millis(700);

fn foo(file: &str) -> String {
    format!("{REGISTRY}/acme/foo/{file}")
}

fn foo_zip() -> String {
    foo("terraform-provider-foo_1.0.0_linux_amd64.zip")
}

fn big_zip(version: &str) -> String {
    format!("{REGISTRY}/acme/big/terraform-provider-big_{version}_linux_amd64.zip")
}

async fn origin(ca: &TestCa) -> FakeOrigin {
    let p = [("linux", "amd64")];
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0"], &p),
            ProviderSpec::new("acme", "bar", &["1.0.0"], &p),
            ProviderSpec::new("acme", "big", &["1.0.0", "2.0.0"], &p).with_payload(2 * MIB),
        ],
    )
    .await
}

/// `GET url`, read whole or cut off (an empty body then), and how long its answer took to
/// start (a large body's own time aside), or to end in an error.
/// With the proxy slowed to 1 MiB/s, `url` (the big provider's archive at `version`, 2 MiB) is
/// still served whole: slow is not silent, so no deadline cuts it.
async fn served_whole_at_1_mib_per_s(
    proxy: &Throttle,
    client: &reqwest::Client,
    url: &str,
    origin: &FakeOrigin,
    version: &str,
) {
    proxy.set_fault(Net::Slow(MIB as u64));
    let started = Instant::now();
    let (got, _) = timed(client, url).await;
    let took = started.elapsed();
    assert_eq!(got.status, 200);
    assert!(
        got.body == origin.archive("acme", "big", version, "linux", "amd64"),
        "served whole after {took:?}"
    );
    assert!(took >= Duration::from_millis(1500), "it was slow: {took:?}");
}

async fn timed(client: &reqwest::Client, url: &str) -> (Got, Duration) {
    let started = Instant::now();
    let resp = crate::support::within(url, client.get(url).send())
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let took = started.elapsed();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let body = crate::support::within(url, resp.bytes()).await;
    let took = if body.is_err() {
        started.elapsed()
    } else {
        took
    };
    let got = Got {
        status,
        headers,
        body: body.map(|b| b.to_vec()).unwrap_or_default(),
    };
    (got, took)
}

/// A failure a client can act on: 503 or 504 (502 for a connection refused or reset), a JSON
/// error body, and `Retry-After`.
fn assert_try_later(got: &Got, what: &str) {
    assert!(
        [502, 503, 504].contains(&got.status.as_u16()),
        "{what}: {} {}",
        got.status,
        got.text()
    );
    assert!(
        !got.code().is_empty(),
        "{what}: a JSON error: {}",
        got.text()
    );
    let retry: u64 = got
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: Retry-After in {:?}", got.headers));
    assert!(retry >= 1, "{what}: Retry-After {retry}");
}

/// Asks `url` until it answers 200 (the dependency is back), for up to `limit`.
async fn recovers(client: &reqwest::Client, url: &str, limit: Duration) -> Got {
    let mut last = String::new();
    poll(limit, async || {
        let got = send_lenient(url, client.get(url)).await;
        last = format!("{} {}", got.status, got.text());
        (got.status == StatusCode::OK && !got.body.is_empty()).then_some(got)
    })
    .await
    .unwrap_or_else(|| panic!("{url} did not recover within {limit:?}: last {last}"))
}

// ---------------------------------------------------------------------------------------------
// A registry origin.

/// A mirror reaching the fake origin through a fault proxy, with short deadlines and version
/// lists stale after 1 s.
async fn origin_behind_proxy() -> (TestCa, FakeOrigin, Throttle, TestMirror, reqwest::Client) {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let proxy = Throttle::start(origin.addr()).await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            connect_to: Some(proxy.addr()),
            extra_upstream: SHORT_UPSTREAM,
            extra_server: SHORT_SERVER,
            extra_cache: "index_ttl = \"1s\"",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    (ca, origin, proxy, mirror, client)
}

/// With `fault` at the origin: what is cached (a stale version list, a version record, an
/// archive) is served at once; a list never fetched is a 503/504 within its deadline, and at
/// once when the host's circuit is open; once the fault ends, the mirror asks the origin again
/// by itself.
async fn origin_fault_serves_the_cache(fault: Net) {
    let (_ca, origin, proxy, mirror, client) = origin_behind_proxy().await;
    let cached = [foo("index.json"), foo("1.0.0.json"), foo_zip()];
    for path in &cached {
        assert_eq!(get(&client, &mirror.url(path)).await.status, 200, "{path}");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await; // the list is stale now
    proxy.set_fault(fault);

    for path in &cached {
        let (got, took) = timed(&client, &mirror.url(path)).await;
        assert_eq!(
            got.status, 200,
            "{fault:?}: {path} is served from the cache"
        );
        assert!(took < AT_ONCE, "{fault:?}: {path} took {took:?}");
    }
    assert!(
        get(&client, &mirror.url(&foo_zip())).await.body
            == origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );
    // Each cold list needs the origin: one deadline (1 s) at most, then at once.
    for ty in ["bar", "big", "nope"] {
        let (got, took) = timed(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/{ty}/index.json")),
        )
        .await;
        assert_try_later(&got, &format!("{fault:?}: {ty}"));
        assert!(
            took < Duration::from_millis(1800),
            "{fault:?}: {ty} took {took:?}"
        );
    }
    let (got, took) = timed(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/big/index.json")),
    )
    .await;
    assert_eq!(
        got.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{fault:?}: the circuit is open: {}",
        got.text()
    );
    assert!(
        took < AT_ONCE,
        "{fault:?}: an open circuit answers at once, took {took:?}"
    );

    proxy.set_fault(Net::Pass);
    let got = recovers(
        &client,
        &mirror.url(&big_zip("1.0.0")),
        Duration::from_secs(5),
    )
    .await;
    assert!(got.body == origin.archive("acme", "big", "1.0.0", "linux", "amd64"));
}

#[tokio::test(flavor = "multi_thread")]
async fn origin_hangs_cached_answers_at_once_cold_ones_in_time() {
    origin_fault_serves_the_cache(Net::Blackhole).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn origin_refuses_cached_answers_at_once_cold_ones_in_time() {
    origin_fault_serves_the_cache(Net::Refuse).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn origin_resets_cached_answers_at_once_cold_ones_in_time() {
    origin_fault_serves_the_cache(Net::Reset).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn origin_stalls_mid_archive_the_download_ends_and_nothing_is_kept() {
    let (_ca, origin, proxy, mirror, client) = origin_behind_proxy().await;
    assert_eq!(
        get(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/big/1.0.0.json"))
        )
        .await
        .status,
        200
    );
    // Each connection stops after 256 KiB of answers; the 2 MiB archive never arrives whole.
    proxy.set_fault(Net::Stall { after: 256 << 10 });
    let (got, took) = timed(&client, &mirror.url(&big_zip("1.0.0"))).await;
    let whole = origin.archive("acme", "big", "1.0.0", "linux", "amd64");
    assert!(
        got.body != whole,
        "a stalled download is never served whole"
    );
    if got.status != 200 {
        assert_try_later(&got, "a stall before the answer started");
    }
    assert!(
        took < Duration::from_secs(4),
        "the stall ends the download within upstream.idle_timeout: {took:?}"
    );
    crate::support::eventually(
        "the staging file is removed",
        Duration::from_secs(5),
        || mirror.staging_files().is_empty(),
    )
    .await;
    assert!(
        mirror.cached_archives().is_empty(),
        "nothing half-written is kept"
    );

    proxy.set_fault(Net::Pass);
    let got = recovers(
        &client,
        &mirror.url(&big_zip("1.0.0")),
        Duration::from_secs(5),
    )
    .await;
    assert!(got.body == whole);
    assert_eq!(mirror.cached_archives().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn origin_trickles_a_download_that_keeps_coming_is_not_cut() {
    let (_ca, origin, proxy, mirror, client) = origin_behind_proxy().await;
    assert_eq!(
        get(
            &client,
            &mirror.url(&format!("{REGISTRY}/acme/big/2.0.0.json"))
        )
        .await
        .status,
        200
    );
    // 2 MiB at 1 MiB/s: longer than the request budget (2 s, which only bounds the answer's
    // start) and the call deadline, but never idle for 1 s.
    served_whole_at_1_mib_per_s(
        &proxy,
        &client,
        &mirror.url(&big_zip("2.0.0")),
        &origin,
        "2.0.0",
    )
    .await;
    crate::support::eventually("the archive is stored", Duration::from_secs(5), || {
        mirror.cached_archives().len() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_budget_bounds_every_call_made_for_it() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let proxy = Throttle::start(origin.addr()).await;
    // Calls to the origin may take 20 s; a client's request may wait 1 s.
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            connect_to: Some(proxy.addr()),
            extra_upstream: "request_timeout = \"20s\"\nidle_timeout = \"20s\"\nretries = 0",
            extra_server: "request_budget = \"1s\"",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    proxy.set_fault(Net::Blackhole);
    let (got, took) = timed(&client, &mirror.url(&foo("index.json"))).await;
    assert_eq!(got.status, StatusCode::GATEWAY_TIMEOUT, "{}", got.text());
    assert_eq!(got.code(), "deadline_exceeded");
    assert!(
        got.message().contains("server.request_budget"),
        "{}",
        got.text()
    );
    assert_try_later(&got, "out of budget");
    assert!(took < Duration::from_millis(1800), "took {took:?}");
    let m = mirror.metrics(&client).await;
    assert_eq!(
        crate::support::sample(
            &m,
            "provender_http_requests_total{route=\"index\",status=\"504\"}"
        ),
        1,
        "counted under its route: {m}"
    );

    // The list's fetch went on in its own flight; once the origin answers, it is served.
    proxy.set_fault(Net::Pass);
    recovers(
        &client,
        &mirror.url(&foo("index.json")),
        Duration::from_secs(25),
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// The object store.

/// A replica on `garage` (bucket prefix `mirror`) reached at `endpoint`, with short deadlines,
/// and `extra_cache` more `[cache]` keys (given before the store's table).
async fn replica(
    ca: &TestCa,
    origin: &FakeOrigin,
    garage: &Garage,
    dir: &std::path::Path,
    endpoint: &str,
    extra_cache: &str,
    deadlines: &str,
) -> TestMirror {
    std::fs::create_dir_all(dir).unwrap();
    let cache = format!(
        "{extra_cache}\n{}{deadlines}",
        garage.cache_toml_at(dir, "mirror", endpoint)
    );
    TestMirror::start_with(
        ca,
        origin,
        MirrorOptions {
            extra_cache: &cache,
            extra_server: SHORT_SERVER,
            cache_dir: Some(&dir.join("cache")),
            ..Default::default()
        },
    )
    .await
}

/// A Garage, replica `a` straight on it (which fills the store), and replica `b` reaching it
/// through a fault proxy with a local tier (so what `b` served once is on its disk).
struct Fleet {
    _work: tempfile::TempDir,
    origin: FakeOrigin,
    garage: Garage,
    proxy: Throttle,
    a: TestMirror,
    b: TestMirror,
    client: reqwest::Client,
}

async fn fleet(bucket: &str) -> Fleet {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let garage = Garage::start(bucket);
    let proxy = Throttle::start(garage.addr()).await;
    let work = tempfile::tempdir().unwrap();
    let a = replica(
        &ca,
        &origin,
        &garage,
        &work.path().join("a"),
        &format!("http://{}", garage.addr()),
        "",
        "",
    )
    .await;
    let b = replica(
        &ca,
        &origin,
        &garage,
        &work.path().join("b"),
        &format!("http://{}", proxy.addr()),
        "local_max_size = \"64 MiB\"",
        SHORT_STORE,
    )
    .await;
    let client = https_client(&ca, &[]);
    Fleet {
        _work: work,
        origin,
        garage,
        proxy,
        a,
        b,
        client,
    }
}

/// Waits until `path`'s archive is committed in `garage`'s bucket (its record, written last).
async fn committed(garage: &Garage, path: &str) {
    let storage = provender::storage::ObjectStorage::new(&garage.settings("mirror")).unwrap();
    let archives = provender::storage::Key::parse("archives").unwrap();
    let record = format!("/{}.json", path.rsplit('/').next().unwrap());
    let found = poll(Duration::from_secs(10), async || {
        let listed = provender::storage::Storage::list(&storage, &archives)
            .await
            .ok()?;
        listed
            .iter()
            .any(|m| m.key.as_str().ends_with(&record))
            .then_some(())
    })
    .await;
    assert!(found.is_some(), "{path} is committed to the bucket");
}

/// Waits until `mirror`'s local tier holds a copy of `path`'s archive.
async fn in_local_tier(mirror: &TestMirror, client: &reqwest::Client, path: &str) {
    let name = path.rsplit('/').next().unwrap().to_string();
    let local = mirror.cache_dir.join("local");
    crate::support::eventually(
        "the local tier has its copy",
        Duration::from_secs(10),
        || {
            crate::support::provender::files_under(&local)
                .iter()
                .any(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == name))
        },
    )
    .await;
    // The file lands a moment before the tier indexes it; its bytes are counted once indexed,
    // and only then does a read find the copy.
    let indexed = crate::support::poll(Duration::from_secs(10), async || {
        let metrics = mirror.metrics(client).await;
        (crate::support::sample(&metrics, "provender_local_tier_bytes") > 0).then_some(())
    })
    .await;
    assert!(indexed.is_some(), "the local tier never indexed its copy");
}

/// With `fault` at the store under replica `b`: what `b` holds in memory (version lists and
/// records) and on its local tier (an archive it served) is served at once; an archive only the
/// store has (replica `a` filled it) is a 503 within the store's deadline, then at once while
/// the store's circuit is open; `/readyz` says unready within `server.ready_timeout`; once the
/// fault ends, the same archive is served, whole and right, and `b` is ready again.
async fn store_fault_serves_memory_and_local_tier(fault: Net, bucket: &str) {
    let Fleet {
        _work,
        garage,
        origin,
        proxy,
        a,
        b,
        client,
        ..
    } = fleet(bucket).await;
    let big = origin.archive("acme", "big", "1.0.0", "linux", "amd64");
    for path in [
        foo("index.json"),
        foo("1.0.0.json"),
        foo_zip(),
        format!("{REGISTRY}/acme/big/index.json"),
        big_zip("1.0.0"),
    ] {
        let got = get(&client, &a.url(&path)).await;
        assert_eq!(got.status, 200, "a: {path}: {}", got.text());
    }
    committed(&garage, &foo_zip()).await;
    committed(&garage, &big_zip("1.0.0")).await;
    // b reads foo through the store (copying its archive to its local tier), and big's records.
    for path in [
        foo("index.json"),
        foo("1.0.0.json"),
        foo_zip(),
        format!("{REGISTRY}/acme/big/1.0.0.json"),
    ] {
        assert_eq!(get(&client, &b.url(&path)).await.status, 200, "b: {path}");
    }
    in_local_tier(&b, &client, &foo_zip()).await;
    let ready = b.root_url("/readyz");
    assert_eq!(get(&client, &ready).await.status, 200);
    proxy.set_fault(fault);

    for path in [foo("index.json"), foo("1.0.0.json"), foo_zip()] {
        let (got, took) = timed(&client, &b.url(&path)).await;
        assert_eq!(got.status, 200, "{fault:?}: {path}: {}", got.text());
        assert!(took < AT_ONCE, "{fault:?}: {path} took {took:?}");
    }
    assert!(
        get(&client, &b.url(&foo_zip())).await.body
            == origin.archive("acme", "foo", "1.0.0", "linux", "amd64")
    );
    let (got, took) = timed(&client, &b.url(&big_zip("1.0.0"))).await;
    assert_try_later(&got, &format!("{fault:?}: an archive only the store has"));
    assert!(
        took < Duration::from_millis(3000),
        "{fault:?}: within the store's deadline: {took:?}"
    );
    let (got, took) = timed(&client, &ready).await;
    assert_eq!(
        got.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{fault:?}: {}",
        got.text()
    );
    assert!(
        took < Duration::from_millis(1800),
        "{fault:?}: /readyz within server.ready_timeout: {took:?}"
    );
    let (got, took) = timed(&client, &b.url(&big_zip("1.0.0"))).await;
    assert_try_later(&got, &format!("{fault:?}: again"));
    assert!(
        got.message().contains("circuit breaker"),
        "{fault:?}: {}",
        got.text()
    );
    assert!(
        took < AT_ONCE,
        "{fault:?}: the store's circuit is open: {took:?}"
    );

    proxy.set_fault(Net::Pass);
    let got = recovers(&client, &b.url(&big_zip("1.0.0")), Duration::from_secs(6)).await;
    assert!(
        got.body == big,
        "served whole and right after the store came back"
    );
    recovers(&client, &ready, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn store_hangs_memory_and_local_tier_serve_the_rest_is_a_503_in_time() {
    store_fault_serves_memory_and_local_tier(Net::Blackhole, "provender-faults-hang").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn store_refuses_memory_and_local_tier_serve_the_rest_is_a_503_in_time() {
    store_fault_serves_memory_and_local_tier(Net::Refuse, "provender-faults-refuse").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn store_resets_memory_and_local_tier_serve_the_rest_is_a_503_in_time() {
    store_fault_serves_memory_and_local_tier(Net::Reset, "provender-faults-reset").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn store_stalls_mid_archive_the_download_ends_in_time() {
    let Fleet {
        _work,
        garage,
        origin,
        proxy,
        a,
        b,
        client,
        ..
    } = fleet("provender-faults-stall").await;
    let big = origin.archive("acme", "big", "1.0.0", "linux", "amd64");
    assert_eq!(get(&client, &a.url(&big_zip("1.0.0"))).await.status, 200);
    committed(&garage, &big_zip("1.0.0")).await;
    assert_eq!(
        get(&client, &b.url(&format!("{REGISTRY}/acme/big/1.0.0.json")))
            .await
            .status,
        200
    );
    // The store's connections stop after 256 KiB of answers: b's read of the 2 MiB archive
    // starts, then nothing more comes.
    proxy.set_fault(Net::Stall { after: 256 << 10 });
    let (got, took) = timed(&client, &b.url(&big_zip("1.0.0"))).await;
    assert!(got.body != big, "never served whole");
    if got.status != 200 {
        assert_try_later(&got, "a stall before the answer started");
    }
    assert!(
        took < Duration::from_secs(4),
        "within cache.object_store.idle_timeout: {took:?}"
    );

    proxy.set_fault(Net::Pass);
    let got = recovers(&client, &b.url(&big_zip("1.0.0")), Duration::from_secs(6)).await;
    assert!(got.body == big, "no torn copy was kept in the local tier");
}

#[tokio::test(flavor = "multi_thread")]
async fn store_trickles_a_read_that_keeps_coming_is_not_cut() {
    let Fleet {
        _work,
        garage,
        origin,
        proxy,
        a,
        b,
        client,
        ..
    } = fleet("provender-faults-slow").await;
    assert_eq!(get(&client, &a.url(&big_zip("1.0.0"))).await.status, 200);
    committed(&garage, &big_zip("1.0.0")).await;
    assert_eq!(
        get(&client, &b.url(&format!("{REGISTRY}/acme/big/1.0.0.json")))
            .await
            .status,
        200
    );
    served_whole_at_1_mib_per_s(&proxy, &client, &b.url(&big_zip("1.0.0")), &origin, "1.0.0").await;
}

// ---------------------------------------------------------------------------------------------
// A release host (the CLIs' own releases).

#[tokio::test(flavor = "multi_thread")]
async fn release_host_hangs_cached_releases_at_once_a_new_build_in_time() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    let (zip, _sums, _signature) = crate::releases::terraform_release(&root);
    let host = crate::support::static_server::StaticServer::start(&ca, &root);
    let port = url::Url::parse(&host.url()).unwrap().port().unwrap();
    let proxy = Throttle::start(([127, 0, 0, 1], port).into()).await;
    let base = format!("https://localhost:{}/", proxy.addr().port());
    let registry = FakeOrigin::start(&ca, &[REGISTRY], vec![]).await;
    let releases = crate::releases::releases_toml_at(work.path(), &base, false);
    let upstream = format!("allow_private_networks = true\n{SHORT_UPSTREAM}");
    let m = TestMirror::start_with(
        &ca,
        &registry,
        MirrorOptions {
            extra_upstream: &upstream,
            extra_server: SHORT_SERVER,
            extra_cache: "index_ttl = \"1s\"",
            extra_toml: &releases,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let cached = [
        "releases/terraform/index.json",
        "releases/terraform/1.11.4/terraform_1.11.4_SHA256SUMS",
        "releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip",
    ];
    for path in cached {
        assert_eq!(get(&client, &m.url(path)).await.status, 200, "{path}");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await; // the list is stale now
    proxy.set_fault(Net::Blackhole);

    for path in cached {
        let (got, took) = timed(&client, &m.url(path)).await;
        assert_eq!(got.status, 200, "{path}: {}", got.text());
        assert!(took < AT_ONCE, "{path} took {took:?}");
    }
    assert!(get(&client, &m.url(cached[2])).await.body == zip);
    // A build never fetched needs the host: held back whole, it is an error within the call's
    // deadline, never a wait as long as the host's silence.
    let darwin = m.url("releases/terraform/1.11.4/terraform_1.11.4_darwin_arm64.zip");
    let (got, took) = timed(&client, &darwin).await;
    assert_try_later(&got, "a build only the host has");
    assert!(took < Duration::from_millis(2500), "took {took:?}");

    proxy.set_fault(Net::Pass);
    let got = recovers(&client, &darwin, Duration::from_secs(5)).await;
    assert_eq!(
        got.body,
        std::fs::read(root.join("hashicorp/terraform/1.11.4/terraform_1.11.4_darwin_arm64.zip"))
            .unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// An OpenID Connect issuer (workload identity).

#[tokio::test(flavor = "multi_thread")]
async fn issuer_hangs_tokens_with_held_keys_pass_at_once_others_are_a_503_in_time() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let issuer = crate::support::issuer::FakeIssuer::start(&ca).await;
    let proxy = Throttle::start(issuer.addr()).await;
    let host = url::Url::parse(&issuer.url()).unwrap();
    let toml = format!(
        r#"[auth]
url_signing_key = "{key}"

[[auth.issuers]]
name = "ci"
issuer = "{url}"
audiences = ["mirror"]
claims = {{ repository_owner = "acme" }}
refetch_interval = "1s"

[upstream.hosts."{host}"]
connect_to = "{proxy}"
"#,
        key = "k".repeat(40),
        url = issuer.url(),
        host = host.host_str().unwrap(),
        proxy = proxy.addr(),
    );
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: SHORT_UPSTREAM,
            extra_server: SHORT_SERVER,
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let index = mirror.url(&foo("index.json"));
    let claims = |kid_note: &str| {
        serde_json::json!({
            "sub": format!("repo:acme/infra:{kid_note}"),
            "aud": "mirror",
            "repository_owner": "acme",
            "iat": provender::clock::now_secs(),
            "exp": provender::clock::now_secs() + 300,
        })
    };
    let ask = async |token: String| {
        let started = Instant::now();
        let got = send_lenient(&index, client.get(&index).bearer_auth(token)).await;
        (got, started.elapsed())
    };
    let (got, _) = ask(issuer.token(&claims("first"))).await;
    assert_eq!(got.status, 200, "{}", got.text());

    proxy.set_fault(Net::Blackhole);
    tokio::time::sleep(Duration::from_millis(1100)).await; // the issuer may be asked again
    // A token signed with a key the mirror holds needs no issuer.
    let (got, took) = ask(issuer.token(&claims("held"))).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(took < AT_ONCE, "took {took:?}");
    // A token signed with a new key needs the issuer's key set: not a refusal of the client
    // (401), but a 503 to come back to, within the call's deadline.
    issuer.rotate("key-2");
    let (got, took) = ask(issuer.token(&claims("rotated"))).await;
    assert_try_later(&got, "a token whose key only the issuer has");
    assert_eq!(
        got.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        got.text()
    );
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    // The OCI registry says so in its own terms.
    let tags = mirror.root_url(&format!("/v2/{REGISTRY}/acme/foo/tags/list"));
    let token = issuer.token(&claims("oci"));
    let got = send_lenient(&tags, client.get(&tags).bearer_auth(token)).await;
    assert_eq!(
        got.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        got.text()
    );
    assert!(got.text().contains("UNAVAILABLE"), "{}", got.text());
    assert!(got.headers.contains_key("retry-after"), "{:?}", got.headers);

    proxy.set_fault(Net::Pass);
    let recovered = poll(Duration::from_secs(5), async || {
        let (got, _) = ask(issuer.token(&claims("rotated"))).await;
        (got.status == StatusCode::OK).then_some(())
    })
    .await;
    assert!(
        recovered.is_some(),
        "the new key is fetched once the issuer answers"
    );
}

// ---------------------------------------------------------------------------------------------
// A centre (`via`).

#[tokio::test(flavor = "multi_thread")]
async fn centre_hangs_the_edge_serves_its_cache_at_once_the_rest_in_time() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let centre = TestMirror::start(&ca, &origin).await;
    let proxy = Throttle::start(([127, 0, 0, 1], centre.url.port().unwrap()).into()).await;
    let via = format!("https://localhost:{}/", proxy.addr().port());
    let hosts =
        format!("[upstream.hosts.\"{REGISTRY}\"]\nvia = \"{via}\"\nconnect_to = \"127.0.0.1:9\"\n");
    let upstream = format!("allow_private_networks = true\n{SHORT_UPSTREAM}");
    let edge = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: &upstream,
            extra_server: SHORT_SERVER,
            extra_cache: "index_ttl = \"1s\"",
            by_name: true,
            extra_toml: &hosts,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let cached = [foo("index.json"), foo("1.0.0.json"), foo_zip()];
    for path in &cached {
        assert_eq!(get(&client, &edge.url(path)).await.status, 200, "{path}");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await; // the list is stale now
    proxy.set_fault(Net::Blackhole);

    for path in &cached {
        let (got, took) = timed(&client, &edge.url(path)).await;
        assert_eq!(got.status, 200, "{path}: {}", got.text());
        assert!(took < AT_ONCE, "{path} took {took:?}");
    }
    let (got, took) = timed(
        &client,
        &edge.url(&format!("{REGISTRY}/acme/bar/index.json")),
    )
    .await;
    assert_try_later(&got, "a list only the centre has");
    assert!(took < Duration::from_millis(1800), "took {took:?}");

    proxy.set_fault(Net::Pass);
    let got = recovers(
        &client,
        &edge.url(&big_zip("1.0.0")),
        Duration::from_secs(5),
    )
    .await;
    assert!(got.body == origin.archive("acme", "big", "1.0.0", "linux", "amd64"));
}
