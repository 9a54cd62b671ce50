//! The complete-hashes job (`[complete_hashes]`): once any part of a version is requested,
//! every platform's `h1:` appears in `<version>.json` without a client downloading it.
//! - the hashes equal what `terraform providers mirror` computes for each platform straight
//!   from the origin, each archive is fetched from the origin once, and none is kept (a later
//!   client's download is a miss); with `keep_archives` they are kept and a later client gets
//!   them from the cache;
//! - the job keeps to its concurrency (the origin never answers more of its archive requests
//!   at once) and its bandwidth (a version cannot be hashed faster than the limit allows);
//! - a client asking for an archive the throttled job is fetching is not held to the job's
//!   bandwidth;
//! - an `h1:` the origin's `packages` extension states wrongly is counted as a verification
//!   failure and never served: the computed one is; a right one is listed only once computed,
//!   and counts nothing;
//! - with `upstream.offline` the job does not run;
//! - the client's own platform costs the origin one download whether the client asks before,
//!   while or just after the job fetched it (`complete_hashes.hold`): `terraform init` of two
//!   providers through fresh mirrors, twenty times over; clients asking together just after the
//!   job hashed the archive, or while the origin holds the job's download; through the registry
//!   facade; and on a replica that shares the store with the one whose job fetched it. What no
//!   client asked for is still hashed, and dropped when its hold is over or at shutdown;
//! - the registry facade's `packages` extension (OpenTofu 1.12) lists only verified hashes,
//!   checked against the origin's zips: none before the requested platform is hashed, then
//!   every platform's `zh:` and the `h1:` and size of those hashed here; `terraform providers
//!   mirror` accepts the answers; an archive the record learns of only from the store (after a
//!   crash) gives its size along with its `h1:`.

use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::Digest;

use crate::support::http::Got;
use crate::support::http::get;
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::tf_config::{
    self, FOO, local_platform, local_platform_and, platform_names, root_module,
};
use crate::support::{Terraform, eventually, h1_of, https_client, poll, sample, within};

/// The local platform plus three others.
fn platforms() -> Vec<(&'static str, &'static str)> {
    local_platform_and(&[
        ("linux", "amd64"),
        ("darwin", "arm64"),
        ("windows", "amd64"),
    ])
}

/// Requests `acme/foo`'s `<version>.json` until it lists an `h1:` for every platform (within
/// `limit`); returns it.
async fn complete_document(
    client: &reqwest::Client,
    mirror: &TestMirror,
    version: &str,
    limit: Duration,
) -> Value {
    complete_version(client, mirror, "foo", version, limit).await
}

/// Requests `acme/<ty>`'s `<version>.json` until it lists an `h1:` for every platform (within
/// `limit`); returns it.
async fn complete_version(
    client: &reqwest::Client,
    mirror: &TestMirror,
    ty: &str,
    version: &str,
    limit: Duration,
) -> Value {
    let url = mirror.url(&format!("{REGISTRY}/acme/{ty}/{version}.json"));
    poll(limit, async || {
        let got = get(client, &url).await;
        assert_eq!(got.status, 200, "{url}");
        let doc = got.json();
        platform_names(&platforms())
            .iter()
            .all(|p| h1_of(&doc, p).is_some())
            .then_some(doc)
    })
    .await
    .unwrap_or_else(|| panic!("{url}: some platform still has no h1 after {limit:?}"))
}

async fn origin(ca: &TestCa, spec: ProviderSpec) -> FakeOrigin {
    FakeOrigin::start(ca, &[REGISTRY], vec![spec]).await
}

/// provender with the job on, configured by these `[complete_hashes]` keys.
async fn mirror_with_job(ca: &TestCa, origin: &FakeOrigin, keys: &str) -> TestMirror {
    let opts = MirrorOptions {
        hash_job: Some(keys),
        ..Default::default()
    };
    TestMirror::start_with(ca, origin, opts).await
}

/// `acme/foo` 1.1.0's `<version>.json`: the request that sets the job going.
async fn version_document(client: &reqwest::Client, mirror: &TestMirror) -> Got {
    let got = get(
        client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.1.0.json")),
    )
    .await;
    assert_eq!(got.status, 200);
    got
}

/// The URL of `acme/foo` 1.1.0's archive for `os_arch` on `mirror`.
fn archive_url(mirror: &TestMirror, origin: &FakeOrigin, (os, arch): (&str, &str)) -> String {
    mirror.url(&format!(
        "{REGISTRY}/acme/foo/{}",
        origin.filename("acme", "foo", "1.1.0", os, arch)
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_platform_is_hashed_after_one_request_as_terraform_hashes_it() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    let mirror = mirror_with_job(&ca, &origin, "hold = \"1s\"").await;
    let client = https_client(&ca, &[]);

    // One request for the version document, no archive: the job does the rest.
    version_document(&client, &mirror).await;
    let ours = complete_document(&client, &mirror, "1.1.0", Duration::from_secs(20)).await;
    assert_eq!(
        origin.count(RequestKind::Archive),
        p.len(),
        "each platform's archive fetched once"
    );

    // Terraform's own hashes, mirroring every platform straight from the origin.
    let direct_out = tempfile::tempdir().unwrap();
    let work = root_module(FOO);
    let direct = Terraform::new(&ca, &tf_config::registry_host(&origin.providers_v1_url()));
    let platform_args: Vec<String> = platform_names(&platforms())
        .iter()
        .map(|p| format!("-platform={p}"))
        .collect();
    let mut args: Vec<&str> = vec!["providers", "mirror", "-no-color"];
    args.extend(platform_args.iter().map(String::as_str));
    args.push(direct_out.path().to_str().unwrap());
    direct.run(work.path(), &args).await.assert_success();
    let terraforms: Value = serde_json::from_slice(
        &std::fs::read(
            direct_out
                .path()
                .join(format!("{REGISTRY}/acme/foo/1.1.0.json")),
        )
        .unwrap(),
    )
    .unwrap();
    for name in platform_names(&platforms()) {
        let expected = h1_of(&terraforms, &name).expect("terraform wrote an h1");
        assert_eq!(
            h1_of(&ours, &name),
            Some(expected),
            "{name}: the job's h1 vs terraform's"
        );
    }

    // Once their hold is over (no client asked), the job's downloads are dropped.
    let metrics = poll(Duration::from_secs(20), async || {
        let metrics = mirror.metrics(&client).await;
        (sample(&metrics, "provender_fills_in_flight") == 0).then_some(metrics)
    })
    .await
    .expect("the holds end");
    assert_eq!(
        sample(
            &metrics,
            "provender_hash_job_archives_total{result=\"hashed\"}"
        ),
        p.len() as u64
    );
    assert_eq!(sample(&metrics, "provender_hash_job_queue"), 0);
    assert!(sample(&metrics, "provender_hash_job_bytes_total") > 0);
    // No client asked for an archive: the job kept none (complete_hashes.keep_archives).
    assert_eq!(sample(&metrics, "provender_cache_archives"), 0);
    assert!(
        stored_zips(&mirror).is_empty(),
        "{:?}",
        stored_zips(&mirror)
    );
    assert_eq!(mirror.staging_files(), Vec::<std::path::PathBuf>::new());

    // A client's download afterwards is a miss like any, listed with the same h1:.
    origin.reset_counts();
    let (os, arch) = p[1];
    let zip = get(&client, &archive_url(&mirror, &origin, (os, arch))).await;
    assert_eq!(zip.status, 200);
    assert_eq!(zip.body, origin.archive("acme", "foo", "1.1.0", os, arch));
    assert_eq!(origin.count(RequestKind::Archive), 1);
    poll(Duration::from_secs(10), async || {
        (stored_zips(&mirror).len() == 1).then_some(())
    })
    .await
    .expect("the client's download is cached");
    let after = version_document(&client, &mirror).await.json();
    for name in platform_names(&p) {
        assert_eq!(h1_of(&after, &name), h1_of(&ours, &name), "{name}");
    }
}

/// The archives in the mirror's cache directory.
fn stored_zips(mirror: &TestMirror) -> Vec<std::path::PathBuf> {
    crate::support::provender::files_under(&mirror.cache_dir.join("archives"))
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "zip"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn with_keep_archives_the_jobs_downloads_are_cached() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    let mirror = mirror_with_job(&ca, &origin, "keep_archives = true").await;
    let client = https_client(&ca, &[]);
    version_document(&client, &mirror).await;
    complete_document(&client, &mirror, "1.1.0", Duration::from_secs(20)).await;
    assert_eq!(stored_zips(&mirror).len(), p.len());
    // A client's download afterwards comes from the cache.
    origin.reset_counts();
    let (os, arch) = p[1];
    let zip = get(&client, &archive_url(&mirror, &origin, (os, arch))).await;
    assert_eq!(zip.status, 200);
    assert_eq!(zip.body, origin.archive("acme", "foo", "1.1.0", os, arch));
    assert_eq!(origin.count(RequestKind::Archive), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_job_keeps_to_its_concurrency_and_bandwidth() {
    let ca = TestCa::new();
    let p = local_platform_and(&[
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "arm64"),
        ("windows", "amd64"),
        ("freebsd", "amd64"),
    ]);
    let payload = 64 * 1024;
    let origin = origin(
        &ca,
        ProviderSpec::new("acme", "foo", &["1.1.0"], &p).with_payload(payload),
    )
    .await;
    // Each archive request stays open a while, so the job's downloads overlap at the origin.
    origin.set_fault(Fault::Delay {
        kind: RequestKind::Archive,
        millis: 400,
    });
    let mirror = mirror_with_job(&ca, &origin, "concurrency = 2\nmax_bandwidth = \"64 KiB\"").await;
    let client = https_client(&ca, &[]);

    let started = Instant::now();
    version_document(&client, &mirror).await;
    complete_document(&client, &mirror, "1.1.0", Duration::from_secs(60)).await;
    let took = started.elapsed();

    assert_eq!(origin.count(RequestKind::Archive), p.len());
    assert_eq!(
        origin.archives_peak(),
        2,
        "the job fetches two archives at once, never more"
    );
    // Every archive holds `payload` incompressible bytes; all of them pass through one budget
    // of 64 KiB a second, of which the first second's worth may go at once.
    let total = (payload * p.len()) as f64;
    let least = Duration::from_secs_f64((total - 64.0 * 1024.0) / (64.0 * 1024.0));
    assert!(
        took >= least,
        "{} archives of {payload} bytes hashed in {took:?}, faster than 64 KiB/s allows ({least:?})",
        p.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_is_not_held_to_the_jobs_bandwidth() {
    let ca = TestCa::new();
    let p = local_platform_and(&[("linux", "amd64"), ("darwin", "arm64")]);
    // At the job's 64 KiB a second, one of these archives takes half a minute.
    let payload = 2 * 1024 * 1024;
    let origin = origin(
        &ca,
        ProviderSpec::new("acme", "foo", &["1.1.0"], &p).with_payload(payload),
    )
    .await;
    let mirror = mirror_with_job(&ca, &origin, "concurrency = 2\nmax_bandwidth = \"64 KiB\"").await;
    let client = https_client(&ca, &[]);
    version_document(&client, &mirror).await;
    // Wait until the job is fetching every platform, then ask for one of them.
    poll(Duration::from_secs(10), async || {
        (origin.count(RequestKind::Archive) == p.len()).then_some(())
    })
    .await
    .expect("the job started fetching");
    let (os, arch) = p[0];
    let started = Instant::now();
    let zip = get(&client, &archive_url(&mirror, &origin, (os, arch))).await;
    let took = started.elapsed();
    assert_eq!(zip.status, 200);
    assert_eq!(zip.body, origin.archive("acme", "foo", "1.1.0", os, arch));
    assert_eq!(
        origin.count(RequestKind::Archive),
        p.len(),
        "the client joined the job's download"
    );
    assert!(
        took < Duration::from_secs(15),
        "the client took {took:?}: held to the job's 64 KiB/s it would take over 30 s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_h1_from_the_packages_extension_is_counted_and_never_served() {
    packages_extension_h1s(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_right_h1_from_the_packages_extension_is_served_once_checked() {
    packages_extension_h1s(false).await;
}

/// An origin with the OpenTofu registry's `packages` extension, stating each archive's `h1:`
/// rightly or (`wrong`) not: either way nothing is listed before the job computed it, what is
/// listed is the computed hash, and only wrong statements count as mismatches.
async fn packages_extension_h1s(wrong: bool) {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(
        &ca,
        ProviderSpec::new("acme", "foo", &["1.1.0"], &p).with_packages_extension(),
    )
    .await;
    if wrong {
        origin.set_fault(Fault::WrongReportedH1);
    }
    let mirror = mirror_with_job(&ca, &origin, "").await;
    let client = https_client(&ca, &[]);
    let first = version_document(&client, &mirror).await;
    for name in platform_names(&platforms()) {
        assert_eq!(
            h1_of(&first.json(), &name),
            None,
            "{name}: an h1 the origin states is not served before it is checked"
        );
    }
    let doc = complete_document(&client, &mirror, "1.1.0", Duration::from_secs(20)).await;
    for (os, arch) in &p {
        assert_eq!(
            h1_of(&doc, &format!("{os}_{arch}")),
            Some(origin.h1_zip("acme", "foo", "1.1.0", os, arch)),
            "{os}_{arch}: the computed h1"
        );
    }
    let metrics = mirror.metrics(&client).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_verification_failures_total{reason=\"reported_h1_mismatch\"}"
        ),
        if wrong { p.len() as u64 } else { 0 }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn offline_the_job_does_not_run() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    let cache = tempfile::tempdir().unwrap();
    let client = https_client(&ca, &[]);
    let (os, arch) = p[0];

    // Online with the job off: one platform cached, the others not.
    let mut online = TestMirror::start_on(&ca, &origin, cache.path()).await;
    assert_eq!(
        get(&client, &archive_url(&online, &origin, p[0]))
            .await
            .status,
        200
    );
    online.stop().await;

    let mut offline = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            cache_dir: Some(cache.path()),
            extra_upstream: "offline = true",
            hash_job: Some(""),
            ..Default::default()
        },
    )
    .await;
    origin.reset_counts();
    let url = offline.url(&format!("{REGISTRY}/acme/foo/1.1.0.json"));
    assert_eq!(get(&client, &url).await.status, 200);
    assert_eq!(
        get(&client, &archive_url(&offline, &origin, p[0]))
            .await
            .status,
        200
    );
    // Online, the job finishes this version well within this time (see above).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let doc = get(&client, &url).await.json();
    let hashed: Vec<String> = platform_names(&platforms())
        .into_iter()
        .filter(|p| h1_of(&doc, p).is_some())
        .collect();
    assert_eq!(hashed, vec![format!("{os}_{arch}")]);
    assert_eq!(origin.total_requests(), 0, "nothing asked of the origin");
    let metrics = offline.metrics(&client).await;
    for result in ["hashed", "present", "failed"] {
        let series = format!("provender_hash_job_archives_total{{result=\"{result}\"}}");
        assert_eq!(sample(&metrics, &series), 0, "{series}");
    }
    offline.stop().await;
}

/// The file names of the archives in the mirror's cache directory, sorted.
fn stored_names(mirror: &TestMirror) -> Vec<String> {
    let mut names: Vec<String> = stored_zips(mirror)
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A root module requiring `acme/foo` and `acme/bar`, any version.
const FOO_AND_BAR: &str = "terraform {\n  required_providers {\n    foo = { source = \"acme/foo\" }\n    bar = { source = \"acme/bar\" }\n  }\n}\n";

#[tokio::test(flavor = "multi_thread")]
async fn terraform_init_through_a_fresh_mirror_downloads_each_archive_once() {
    let ca = TestCa::new();
    let p = platforms();
    let providers = [("foo", "1.1.0"), ("bar", "2.3.0")];
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        providers
            .iter()
            .map(|(ty, version)| ProviderSpec::new("acme", ty, &[version], &p))
            .collect(),
    )
    .await;
    let client = https_client(&ca, &[]);
    let (os, arch) = local_platform();
    let mut wanted: Vec<String> = providers
        .iter()
        .map(|(ty, version)| origin.filename("acme", ty, version, os, arch))
        .collect();
    wanted.sort();
    // Whether the job's download of the client's platform ends before, while or after the
    // client asks for it is up to timing: many runs meet every case.
    for run in 1..=20 {
        origin.reset_counts();
        let mut mirror = mirror_with_job(&ca, &origin, "").await;
        let work = root_module(FOO_AND_BAR);
        Terraform::new(&ca, &tf_config::network_mirror(mirror.url.as_str()))
            .init(work.path())
            .await
            .assert_success();
        for (ty, version) in providers {
            assert_eq!(
                origin.downloads_of("acme", ty, version, os, arch),
                1,
                "run {run}: acme/{ty} {version} {os}_{arch} downloaded more than once: {:?}",
                origin.requests()
            );
            // The job hashes every other platform all the same.
            complete_version(&client, &mirror, ty, version, Duration::from_secs(20)).await;
        }
        // Shutting down ends the holds: only what the client asked for is kept.
        mirror.stop().await;
        assert_eq!(
            origin.count(RequestKind::Archive),
            providers.len() * p.len(),
            "run {run}: one download per archive: {:?}",
            origin.requests()
        );
        assert_eq!(stored_names(&mirror), wanted, "run {run}");
        assert!(mirror.staging_files().is_empty(), "run {run}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_asking_just_after_the_job_hashed_their_archive_get_its_download() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    // A hold longer than this test needs, however busy the machine.
    let mut mirror = mirror_with_job(&ca, &origin, "hold = \"2m\"").await;
    let client = https_client(&ca, &[]);
    version_document(&client, &mirror).await;
    // Every platform's h1 is listed: the job's downloads are all checked and hashed, and none
    // is in the store.
    complete_document(&client, &mirror, "1.1.0", Duration::from_secs(20)).await;
    assert_eq!(origin.count(RequestKind::Archive), p.len());
    assert!(stored_zips(&mirror).is_empty());

    // Now two clients ask for their platform's archive together.
    let (os, arch) = local_platform();
    let expected = origin.archive("acme", "foo", "1.1.0", os, arch);
    let url = archive_url(&mirror, &origin, (os, arch));
    let (first, second) = tokio::join!(get(&client, &url), get(&client, &url));
    for got in [first, second] {
        assert_eq!(got.status, 200);
        assert!(got.body == expected, "the origin's archive");
    }
    assert_eq!(
        origin.downloads_of("acme", "foo", "1.1.0", os, arch),
        1,
        "the clients got the job's download: {:?}",
        origin.requests()
    );
    let name = origin.filename("acme", "foo", "1.1.0", os, arch);
    poll(Duration::from_secs(10), async || {
        (stored_names(&mirror) == [name.clone()]).then_some(())
    })
    .await
    .expect("the job's download is cached once a client asked for it");
    let again = get(&client, &url).await;
    assert!(again.status == 200 && again.body == expected);

    // The other platforms were hashed and are not kept: their holds end at shutdown.
    mirror.stop().await;
    assert_eq!(origin.count(RequestKind::Archive), p.len());
    assert_eq!(stored_names(&mirror), [name]);
    assert!(mirror.staging_files().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_arriving_together_while_the_origin_holds_the_jobs_download_share_it() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    origin.hold_archives();
    let mut mirror = mirror_with_job(&ca, &origin, "concurrency = 4").await;
    let client = https_client(&ca, &[]);
    version_document(&client, &mirror).await;
    eventually(
        "the job's requests reach the origin",
        Duration::from_secs(10),
        || origin.archives_held() == p.len(),
    )
    .await;

    let (os, arch) = local_platform();
    let url = archive_url(&mirror, &origin, (os, arch));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { get(&client, &url).await })
        })
        .collect();
    let joined = "provender_cache_lookups_total{kind=\"archive\",result=\"joined\"}";
    poll(Duration::from_secs(10), async || {
        (sample(&mirror.metrics(&client).await, joined) == 2).then_some(())
    })
    .await
    .expect("both clients joined the job's download");
    origin.release_archives();

    let expected = origin.archive("acme", "foo", "1.1.0", os, arch);
    for c in clients {
        let got = within("a client's download", c).await.unwrap();
        assert_eq!(got.status, 200);
        assert!(got.body == expected, "the origin's archive");
    }
    assert_eq!(origin.downloads_of("acme", "foo", "1.1.0", os, arch), 1);
    assert_eq!(origin.count(RequestKind::Archive), p.len());
    mirror.stop().await;
    assert_eq!(
        stored_names(&mirror),
        [origin.filename("acme", "foo", "1.1.0", os, arch)]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn through_the_registry_facade_a_client_after_the_job_gets_its_download() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    let mut mirror = mirror_with_job(&ca, &origin, "hold = \"2m\"").await;
    let client = https_client(&ca, &[]);
    let (os, arch) = local_platform();

    // The registry protocol's download answer is what sets the job going here.
    let answer = get(
        &client,
        &mirror.url(&format!(
            "v1/providers/{REGISTRY}/acme/foo/1.1.0/download/{os}/{arch}"
        )),
    )
    .await;
    assert_eq!(answer.status, 200);
    let download = answer.json()["download_url"]
        .as_str()
        .expect("a download_url")
        .to_string();
    poll(Duration::from_secs(20), async || {
        (origin.count(RequestKind::Archive) == p.len()).then_some(())
    })
    .await
    .expect("the job fetches every platform");
    complete_document(&client, &mirror, "1.1.0", Duration::from_secs(20)).await;

    let zip = get(&client, mirror.url.join(&download).unwrap().as_str()).await;
    assert_eq!(zip.status, 200);
    assert!(zip.body == origin.archive("acme", "foo", "1.1.0", os, arch));
    assert_eq!(
        origin.downloads_of("acme", "foo", "1.1.0", os, arch),
        1,
        "{:?}",
        origin.requests()
    );
    mirror.stop().await;
    assert_eq!(
        stored_names(&mirror),
        [origin.filename("acme", "foo", "1.1.0", os, arch)]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_gets_the_download_another_replicas_job_holds() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    // Two replicas on a shared directory, which enforces conditional creates (fleet leases).
    let shared = tempfile::tempdir().unwrap();
    let store = format!(
        "[cache.object_store]\nbucket = \"{}\"\nprefix = \"mirror\"\n",
        shared.path().display()
    );
    let replica = async |job| {
        let opts = MirrorOptions {
            extra_cache: "backend = \"directory\"",
            extra_toml: &store,
            hash_job: job,
            ..Default::default()
        };
        TestMirror::start_with(&ca, &origin, opts).await
    };
    let mut a = replica(Some("hold = \"2m\"")).await;
    let mut b = replica(None).await;
    let client = https_client(&ca, &[]);

    // A's job fetches and hashes every platform; each waits for a client, leased on A.
    version_document(&client, &a).await;
    complete_document(&client, &a, "1.1.0", Duration::from_secs(20)).await;
    assert_eq!(origin.count(RequestKind::Archive), p.len());

    // A client of B asks for its platform's archive: B follows A's lease and asks A for it.
    let (os, arch) = local_platform();
    let zip = within(
        "B's download",
        get(&client, &archive_url(&b, &origin, (os, arch))),
    )
    .await;
    assert_eq!(zip.status, 200);
    assert!(zip.body == origin.archive("acme", "foo", "1.1.0", os, arch));
    assert_eq!(
        origin.downloads_of("acme", "foo", "1.1.0", os, arch),
        1,
        "one download for the fleet: {:?}",
        origin.requests()
    );
    let metrics = b.metrics(&client).await;
    assert_eq!(
        sample(&metrics, "provender_fleet_fills_total{role=\"follower\"}"),
        1
    );
    b.stop().await;
    a.stop().await;
    assert_eq!(origin.count(RequestKind::Archive), p.len());
}

/// `acme/foo` 1.1.0's registry download answer for `os_arch`, through the facade.
async fn facade_answer(
    client: &reqwest::Client,
    mirror: &TestMirror,
    (os, arch): (&str, &str),
) -> Value {
    let got = get(
        client,
        &mirror.url(&format!(
            "v1/providers/{REGISTRY}/acme/foo/1.1.0/download/{os}/{arch}"
        )),
    )
    .await;
    assert_eq!(got.status, 200, "{os}_{arch}");
    got.json()
}

/// Checks a download answer's `packages` against the origin's bytes: every platform listed,
/// its `zh:` the SHA-256 of the origin's zip; `h1:` (what the origin computes) and
/// `package_size` (the zip's size) exactly for the platforms in `hashed`, only the `zh:` for
/// the others.
fn check_packages(answer: &Value, origin: &FakeOrigin, hashed: &[(&str, &str)]) {
    let packages = answer["packages"]
        .as_object()
        .unwrap_or_else(|| panic!("no packages in {answer}"));
    assert_eq!(packages.len(), platforms().len(), "{answer}");
    for (os, arch) in platforms() {
        let entry = &packages[&format!("{os}_{arch}")];
        let zip = origin.archive("acme", "foo", "1.1.0", os, arch);
        let zh = format!("zh:{}", hex::encode(sha2::Sha256::digest(&zip)));
        let hashes: Vec<&str> = entry["hashes"]
            .as_array()
            .unwrap_or_else(|| panic!("{os}_{arch}: no hashes in {entry}"))
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        if hashed.contains(&(os, arch)) {
            let h1 = origin.h1_zip("acme", "foo", "1.1.0", os, arch);
            assert_eq!(hashes, [zh.as_str(), h1.as_str()], "{os}_{arch}");
            assert_eq!(entry["package_size"], zip.len(), "{os}_{arch}");
        } else {
            assert_eq!(hashes, [zh.as_str()], "{os}_{arch}: not hashed yet");
            assert_eq!(
                entry.get("package_size"),
                None,
                "{os}_{arch}: not hashed yet"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_facades_download_answer_lists_only_verified_hashes_in_packages() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let local = local_platform();
    let other = *p.iter().find(|p| **p != local).unwrap();

    // Nothing hashed here yet: no `packages`, which OpenTofu would require to state the
    // requested platform's size.
    let first = facade_answer(&client, &mirror, local).await;
    assert_eq!(first.get("packages"), None, "{first}");

    let download = first["download_url"].as_str().unwrap();
    let zip = get(&client, mirror.url.join(download).unwrap().as_str()).await;
    assert_eq!(zip.status, 200);

    // Once the local archive is hashed (its record updated after the download ends), its
    // entry is complete and the others have their signed `zh:`.
    let after = poll(Duration::from_secs(10), async || {
        let answer = facade_answer(&client, &mirror, local).await;
        answer.get("packages").is_some().then_some(answer)
    })
    .await
    .expect("packages once the archive is hashed");
    check_packages(&after, &origin, &[local]);
    // Asked for a platform not hashed here, the answer has no `packages` again.
    let unhashed = facade_answer(&client, &mirror, other).await;
    assert_eq!(unhashed.get("packages"), None, "{unhashed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_job_the_facade_lists_every_platforms_hashes_and_terraform_accepts_them() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    let mirror = mirror_with_job(&ca, &origin, "hold = \"1s\"\nkeep_archives = true").await;
    let client = https_client(&ca, &[]);
    version_document(&client, &mirror).await;
    complete_document(&client, &mirror, "1.1.0", Duration::from_secs(20)).await;
    for platform in &p {
        check_packages(
            &facade_answer(&client, &mirror, *platform).await,
            &origin,
            &p,
        );
    }

    // Terraform reads the same answers (and ignores `packages`) in `providers mirror`.
    let out = tempfile::tempdir().unwrap();
    let work = root_module(FOO);
    let facade = tf_config::registry_host(&format!("{}v1/providers/{REGISTRY}/", mirror.url));
    let mut args: Vec<String> = vec!["providers".into(), "mirror".into(), "-no-color".into()];
    args.extend(p.iter().map(|(o, a)| format!("-platform={o}_{a}")));
    args.push(out.path().to_str().unwrap().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Terraform::new(&ca, &facade)
        .run(work.path(), &args)
        .await
        .assert_success();
    for (os, arch) in &p {
        let name = origin.filename("acme", "foo", "1.1.0", os, arch);
        let got = std::fs::read(out.path().join(REGISTRY).join("acme/foo").join(&name)).unwrap();
        assert!(
            got == origin.archive("acme", "foo", "1.1.0", os, arch),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_archive_picked_up_from_the_store_gives_its_size_with_its_h1() {
    let ca = TestCa::new();
    let p = platforms();
    let origin = origin(&ca, ProviderSpec::new("acme", "foo", &["1.1.0"], &p)).await;
    let mut mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let local = local_platform();
    let download = facade_answer(&client, &mirror, local).await["download_url"]
        .as_str()
        .unwrap()
        .to_string();
    let zip = get(&client, mirror.url.join(&download).unwrap().as_str()).await;
    assert_eq!(zip.status, 200);
    poll(Duration::from_secs(10), async || {
        let answer = facade_answer(&client, &mirror, local).await;
        answer.get("packages").is_some().then_some(())
    })
    .await
    .expect("packages once the archive is hashed");
    mirror.stop().await;

    // As after a crash between the archive's commit and its record's update: the version
    // record knows neither its h1: nor its size.
    let record = crate::support::provender::files_under(&mirror.cache_dir.join("metadata"))
        .into_iter()
        .find(|f| f.ends_with("acme/foo/1.1.0.json"))
        .expect("the version record");
    let mut rec: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let pkg = rec["packages"][format!("{}_{}", local.0, local.1)]
        .as_object_mut()
        .unwrap();
    pkg.remove("h1");
    pkg.remove("size");
    std::fs::write(&record, serde_json::to_vec(&rec).unwrap()).unwrap();

    let again = TestMirror::start_on(&ca, &origin, &mirror.cache_dir).await;
    check_packages(
        &facade_answer(&client, &again, local).await,
        &origin,
        &[local],
    );
}
