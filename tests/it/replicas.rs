//! Several replicas sharing one object store (a real Garage on loopback), each the real
//! `provender` binary with its own local directory:
//! - `terraform init` through replica A fills the bucket; through replica B, in a fresh
//!   directory, nothing is asked of the origin at all;
//! - replica A killed with SIGKILL in the middle of a fill: nothing served afterwards is wrong,
//!   and B serves the archive whole;
//! - both replicas missing the same archive at once end with one correct object, each having
//!   fetched it (Garage does not enforce conditional creates: no fleet lease);
//! - on a store that enforces them (a shared directory), replicas missing the same archive at
//!   once fetch it once between them, and a replica that dies holding the lease is taken over;
//! - `cache.redirect_downloads` answers cached archives with pre-signed URLs clients follow;
//! - `seed`, `ls`, `verify`, `export` and `import` work on an object-store cache;
//! - usage counts from both replicas add up in `provender usage` and `prune --dry-run`.

use std::path::Path;
use std::time::Duration;

use crate::support::cli::{config_file, export_bundle, import, path_str, provender, seed, zips};
use crate::support::garage::Garage;
use crate::support::http::get;
use crate::support::origin::{FakeOrigin, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, ServerProcess, write_config};
use crate::support::tf_config::{self, FOO_BAR_DIRS, local_platform_and};
use crate::support::throttle::Throttle;
use crate::support::{https_client, init_fresh, poll, within};

const MIB: usize = 1 << 20;

fn platforms() -> Vec<(&'static str, &'static str)> {
    local_platform_and(&[("linux", "amd64"), ("darwin", "arm64")])
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
            ProviderSpec::new("acme", "big", &["1.0.0", "2.0.0"], &p).with_payload(4 * MIB),
        ],
    )
    .await
}

/// A replica: the real binary, its own directory, the shared bucket under `prefix`.
fn replica(
    ca: &TestCa,
    dir: &Path,
    origin: std::net::SocketAddr,
    garage: &Garage,
    extra_cache: &str,
) -> ServerProcess {
    replica_with(ca, dir, origin, garage, extra_cache, "").0
}

/// [`replica`] with more TOML tables (`[auth]`, `[usage]`); also its configuration file.
fn replica_with(
    ca: &TestCa,
    dir: &Path,
    origin: std::net::SocketAddr,
    garage: &Garage,
    extra_cache: &str,
    extra_toml: &str,
) -> (ServerProcess, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let cache = format!("{extra_cache}\n{}", garage.cache_toml(dir, "mirror"));
    spawn_replica(ca, dir, origin, &cache, extra_toml)
}

/// The real binary in `dir`, with `cache` in its `[cache]` table and `extra_toml` after it;
/// also its configuration file.
fn spawn_replica(
    ca: &TestCa,
    dir: &Path,
    origin: std::net::SocketAddr,
    cache: &str,
    extra_toml: &str,
) -> (ServerProcess, std::path::PathBuf) {
    let config = write_config(
        ca,
        dir,
        origin,
        &MirrorOptions {
            extra_cache: cache,
            extra_toml,
            ..Default::default()
        },
    );
    (ServerProcess::spawn(&config), config)
}

/// Every archive object and record in the bucket, as `(key, size)`.
async fn bucket_archives(garage: &Garage) -> Vec<(String, u64)> {
    let storage = provender::storage::ObjectStorage::new(&garage.settings("mirror")).unwrap();
    let listed = provender::storage::Storage::list(
        &storage,
        &provender::storage::Key::parse("archives").unwrap(),
    )
    .await
    .unwrap();
    listed
        .into_iter()
        .map(|m| (m.key.to_string(), m.size))
        .collect()
}

/// Starts downloading `path` from `replica`, and kills the replica (SIGKILL) once the first
/// bytes are in.
async fn kill_mid_download(client: &reqwest::Client, mut replica: ServerProcess, path: &str) {
    let mut resp = within("the download", client.get(replica.url(path)).send())
        .await
        .unwrap();
    let _ = within("first bytes", resp.chunk()).await.unwrap();
    replica.signal("KILL");
    let _ = tokio::task::spawn_blocking(move || replica.wait()).await;
}

fn big_zip(version: &str, platform: &str) -> String {
    format!("{REGISTRY}/acme/big/terraform-provider-big_{version}_{platform}.zip")
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_share_one_bucket_and_the_origin_is_asked_once() {
    let garage = Garage::start("provender-replicas");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let a = replica(&ca, &work.path().join("a"), origin.addr(), &garage, "");
    let b = replica(&ca, &work.path().join("b"), origin.addr(), &garage, "");

    init_fresh(
        &ca,
        &tf_config::network_mirror(a.url.as_str()),
        FOO_BAR_DIRS,
    )
    .await;
    // terraform init installs the local platform's archive of each of the three providers.
    poll(Duration::from_secs(10), async || {
        let records = bucket_archives(&garage)
            .await
            .into_iter()
            .filter(|(k, _)| k.ends_with(".zip.json"))
            .count();
        (records == 3).then_some(())
    })
    .await
    .expect("A committed every archive to the bucket");
    origin.reset_counts();
    init_fresh(
        &ca,
        &tf_config::network_mirror(b.url.as_str()),
        FOO_BAR_DIRS,
    )
    .await;
    assert_eq!(
        origin.total_requests(),
        0,
        "replica B served everything from the shared bucket: {:?}",
        origin.requests()
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_fill_leaves_nothing_wrong_and_concurrent_misses_end_in_one_object() {
    let garage = Garage::start("provender-kill");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let throttle = Throttle::start(origin.addr()).await;
    throttle.set_rate(2 * MIB as u64);
    let work = tempfile::tempdir().unwrap();
    let a = replica(&ca, &work.path().join("a"), throttle.addr(), &garage, "");
    let b = replica(&ca, &work.path().join("b"), throttle.addr(), &garage, "");
    let client = https_client(&ca, &[]);
    let (os, arch) = platforms()[0];
    let platform = format!("{os}_{arch}");

    // A starts a fill and dies in the middle of it.
    kill_mid_download(&client, a, &big_zip("1.0.0", &platform)).await;
    assert!(
        bucket_archives(&garage)
            .await
            .iter()
            .all(|(k, _)| !k.ends_with(".zip.json")),
        "nothing was committed by the killed replica"
    );
    // B serves it whole (fetching it itself).
    let got = get(&client, &b.url(&big_zip("1.0.0", &platform))).await;
    assert_eq!(got.status, 200);
    assert!(got.body == origin.archive("acme", "big", "1.0.0", os, arch));

    // Both replicas miss the same archive at once: one correct object in the end.
    let a = replica(&ca, &work.path().join("a2"), throttle.addr(), &garage, "");
    let before = origin.count(RequestKind::Archive);
    let urls = [
        a.url(&big_zip("2.0.0", &platform)),
        b.url(&big_zip("2.0.0", &platform)),
    ];
    let mut downloads = Vec::new();
    for url in urls {
        let client = client.clone();
        downloads.push(tokio::spawn(async move { get(&client, &url).await }));
    }
    let expected = origin.archive("acme", "big", "2.0.0", os, arch);
    for d in downloads {
        let got = within("a concurrent miss", d).await.unwrap();
        assert_eq!(got.status, 200);
        assert!(got.body == expected);
    }
    assert_eq!(
        origin.count(RequestKind::Archive) - before,
        2,
        "each replica fetched it once"
    );
    for replica in [&a, &b] {
        let metrics = get(&client, &replica.root_url("/metrics")).await.text();
        assert_eq!(
            crate::support::sample(&metrics, "provender_fleet_fills_total{role=\"leader\"}"),
            0,
            "Garage lets a second conditional create through: no replica leads"
        );
        assert!(
            crate::support::sample(&metrics, "provender_fleet_fills_total{role=\"alone\"}") >= 1
        );
    }
    let zip =
        format!("archives/{REGISTRY}/acme/big/2.0.0/terraform-provider-big_2.0.0_{platform}.zip");
    let mut objects = Vec::new();
    for _ in 0..50 {
        objects = bucket_archives(&garage).await;
        if objects.iter().any(|(k, _)| k == &format!("{zip}.json")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let of_it: Vec<_> = objects
        .iter()
        .filter(|(k, _)| k.starts_with(&zip))
        .collect();
    assert_eq!(of_it.len(), 2, "one archive and its record: {objects:?}");
    assert!(of_it.contains(&&(zip.clone(), expected.len() as u64)));
    // What a third replica reads from the bucket is the origin's archive.
    let c = replica(&ca, &work.path().join("c"), throttle.addr(), &garage, "");
    origin.reset_counts();
    let got = get(&client, &c.url(&big_zip("2.0.0", &platform))).await;
    assert!(got.body == expected);
    assert_eq!(origin.count(RequestKind::Archive), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn redirect_downloads_hand_out_presigned_urls() {
    let garage = Garage::start("provender-redirect");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let r = replica(
        &ca,
        &work.path().join("r"),
        origin.addr(),
        &garage,
        "redirect_downloads = true",
    );
    let client = https_client(&ca, &[]);
    let (os, arch) = platforms()[0];
    let url = r.url(&format!(
        "{REGISTRY}/acme/foo/terraform-provider-foo_1.1.0_{os}_{arch}.zip"
    ));
    // The first request fills the cache and streams; later ones are redirected to the bucket.
    let first = get(&client, &url).await;
    assert!(first.body == origin.archive("acme", "foo", "1.1.0", os, arch));
    let no_redirects = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).unwrap()])
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();
    let mut location = None;
    for _ in 0..50 {
        let resp = no_redirects.get(&url).send().await.unwrap();
        if resp.status() == 302 {
            location = resp.headers().get("location").cloned();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let location = location.expect("a cached archive is redirected");
    let location = location.to_str().unwrap();
    assert!(
        location.starts_with(&garage.endpoint) && location.contains("X-Amz-Signature"),
        "{location}"
    );
    // A client that follows redirects gets the origin's bytes from the bucket.
    let followed = get(&client, &url).await;
    assert_eq!(followed.status, 200);
    assert!(followed.body == origin.archive("acme", "foo", "1.1.0", os, arch));
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_commands_work_on_an_object_store_cache() {
    let garage = Garage::start("provender-ops");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let bucket = |prefix: &str| {
        format!(
            "\n[cache.object_store]\nbucket = \"{}\"\nprefix = \"{prefix}\"\nregion = \"{}\"\nendpoint = \"{}\"\nallow_http = true\naccess_key_id = \"{}\"\nsecret_access_key_file = \"{}\"\n",
            garage.bucket,
            crate::support::garage::REGION,
            garage.endpoint,
            crate::support::garage::ACCESS_KEY_ID,
            garage.secret_file(dir).display()
        )
    };
    // config_file puts `extra` under [upstream]; the backend key goes in through a second
    // file layer: write the [cache] keys by hand.
    let cfg = config_file(
        dir,
        "source.toml",
        &dir.join("local-a"),
        origin.addr(),
        &ca,
        "",
    );
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replacen("[cache]\n", "[cache]\nbackend = \"s3\"\n", 1) + &bucket("source");
    std::fs::write(&cfg, text).unwrap();
    let cfg = path_str(&cfg);

    let (os, arch) = platforms()[0];
    let platform = format!("{os}_{arch}");
    seed(cfg, &[&platform], &["acme/foo@1.1.0", "acme/bar"])
        .await
        .ok();
    let ls = provender(&["ls", "--config", cfg]).await;
    ls.ok();
    assert!(ls.stdout.contains("2 archives"), "{}", ls.stdout);
    assert!(
        ls.stdout.contains("s3://provender-ops/source/"),
        "{}",
        ls.stdout
    );
    provender(&["verify", "--config", cfg]).await.ok();
    let bundle = dir.join("b.tar");
    export_bundle(cfg, &bundle).await;
    let exported = dir.join("mirror");
    provender(&["export", "--config", cfg, path_str(&exported)])
        .await
        .ok();
    assert_eq!(zips(&exported).len(), 2);

    let target = config_file(
        dir,
        "target.toml",
        &dir.join("local-b"),
        origin.addr(),
        &ca,
        "",
    );
    let text = std::fs::read_to_string(&target).unwrap();
    let text = text.replacen("[cache]\n", "[cache]\nbackend = \"s3\"\n", 1) + &bucket("target");
    std::fs::write(&target, text).unwrap();
    let target = path_str(&target);
    import(target, &bundle).await.ok();
    let ls = provender(&["ls", "--config", target, "--json"]).await;
    ls.ok();
    let rows: serde_json::Value = serde_json::from_str(&ls.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["trust"] == "community")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_counts_from_both_replicas_add_up() {
    let garage = Garage::start("provender-usage");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let auth = format!(
        r#"[auth]
url_signing_key = "{key}"

[[auth.clients]]
name = "platform"
token = "platform-team-token-0123456789"

[[auth.clients]]
name = "ci"
token = "ci-fleet-token-0123456789"

[usage]
flush_interval = "1s"
"#,
        key = "k".repeat(40)
    );
    let (a, config) = replica_with(
        &ca,
        &work.path().join("a"),
        origin.addr(),
        &garage,
        "",
        &auth,
    );
    let (b, _) = replica_with(
        &ca,
        &work.path().join("b"),
        origin.addr(),
        &garage,
        "",
        &auth,
    );
    let through = |replica: &ServerProcess, token: &str| {
        tf_config::network_mirror_with_token(&replica.url, token)
    };
    // A known sequence: the platform team once through A; CI twice through B, once through A.
    init_fresh(
        &ca,
        &through(&a, "platform-team-token-0123456789"),
        FOO_BAR_DIRS,
    )
    .await;
    for replica in [&b, &b, &a] {
        init_fresh(
            &ca,
            &through(replica, "ci-fleet-token-0123456789"),
            FOO_BAR_DIRS,
        )
        .await;
    }
    let foo = format!("{REGISTRY}/acme/foo");
    let uses_of = |rows: &serde_json::Value, client: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["address"] == foo.as_str() && r["version"] == "1.1.0" && r["client"] == client
            })
            .map(|r| r["count"].as_u64().unwrap())
            .sum::<u64>()
    };
    let config_arg = path_str(&config);
    let rows = poll(Duration::from_secs(15), async || {
        let out = provender(&["usage", "--json", "--config", config_arg]).await;
        out.ok();
        let rows: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        (uses_of(&rows, "ci") == 3 && uses_of(&rows, "platform") == 1).then_some(rows)
    })
    .await
    .expect("both replicas' counts reached the bucket and add up");
    // Every provider of the configuration was counted, and nothing else.
    let addresses: std::collections::BTreeSet<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        addresses.into_iter().collect::<Vec<_>>(),
        [
            format!("{REGISTRY}/acme/bar"),
            format!("{REGISTRY}/acme/dirs"),
            format!("{REGISTRY}/acme/foo"),
        ]
    );
    let table = provender(&["usage", "--config", config_arg, "--address", "*/acme/foo"]).await;
    table.ok();
    assert!(table.stdout.contains("CLIENT"), "{}", table.stdout);
    assert!(!table.stdout.contains("acme/bar"), "{}", table.stdout);

    // prune --dry-run says who still uses what it would remove.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let dry = provender(&[
        "prune",
        "--config",
        config_arg,
        "--unused-for",
        "1s",
        "--dry-run",
        "--json",
    ])
    .await;
    dry.ok();
    let report: serde_json::Value = serde_json::from_str(&dry.stdout).unwrap();
    let foo_entry = report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["provider"] == foo.as_str())
        .unwrap_or_else(|| panic!("{}", dry.stdout));
    assert_eq!(uses_of(&foo_entry["used_by"], "ci"), 3, "{}", dry.stdout);
    let dry_table = provender(&[
        "prune",
        "--config",
        config_arg,
        "--unused-for",
        "1s",
        "--dry-run",
    ])
    .await;
    dry_table.ok();
    assert!(
        dry_table.stdout.contains("ci (3, last "),
        "{}",
        dry_table.stdout
    );
}

/// Files of `dir` (recursively) whose names end with `.zip`.
fn local_zips(dir: &Path) -> Vec<std::path::PathBuf> {
    crate::support::provender::files_under(dir)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "zip"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_local_tier_keeps_warm_archives_on_disk_and_drops_a_corrupt_copy() {
    let garage = Garage::start("provender-tier");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let tier = "local_max_size = \"64 MiB\"";
    let a = replica(&ca, &work.path().join("a"), origin.addr(), &garage, tier);
    let b = replica(&ca, &work.path().join("b"), origin.addr(), &garage, tier);
    let client = https_client(&ca, &[]);
    let (os, arch) = platforms()[0];
    let platform = format!("{os}_{arch}");
    let expected = origin.archive("acme", "big", "1.0.0", os, arch);
    let metric = async |replica: &ServerProcess, result: &str| {
        let text = get(&client, &replica.root_url("/metrics")).await.text();
        crate::support::sample(
            &text,
            &format!("provender_local_tier_requests_total{{result=\"{result}\"}}"),
        )
    };

    // A fills it: the verified download goes into A's tier as it is committed.
    let got = get(&client, &a.url(&big_zip("1.0.0", &platform))).await;
    assert!(got.status == 200 && got.body == expected);
    let a_local = work.path().join("a/cache/local");
    poll(Duration::from_secs(10), async || {
        let metrics = get(&client, &a.root_url("/metrics")).await.text();
        let done = crate::support::sample(&metrics, "provender_fills_in_flight") == 0
            && crate::support::sample(&metrics, "provender_cache_archives") == 1;
        (done && local_zips(&a_local).len() == 1).then_some(())
    })
    .await
    .expect("A commits its fill, and keeps it in its tier");
    let again = get(&client, &a.url(&big_zip("1.0.0", &platform))).await;
    assert!(again.status == 200 && again.body == expected);
    assert_eq!(metric(&a, "hit").await, 1);

    // B reads it from the bucket once, copies it, then serves it from disk.
    origin.reset_counts();
    let first = get(&client, &b.url(&big_zip("1.0.0", &platform))).await;
    assert!(first.status == 200 && first.body == expected);
    let b_local = work.path().join("b/cache/local");
    poll(Duration::from_secs(10), async || {
        let metrics = get(&client, &b.root_url("/metrics")).await.text();
        let indexed = crate::support::sample(&metrics, "provender_local_tier_bytes") > 0;
        (indexed && local_zips(&b_local).len() == 1).then_some(())
    })
    .await
    .expect("B copies what it read from the bucket");
    let warm = get(&client, &b.url(&big_zip("1.0.0", &platform))).await;
    assert!(warm.status == 200 && warm.body == expected);
    assert_eq!(metric(&b, "hit").await, 1);
    assert_eq!(
        origin.count(RequestKind::Archive),
        0,
        "the origin is not asked"
    );

    // B's copy is damaged on disk: that response is cut short, the copy is dropped, and the
    // next one comes whole from the bucket.
    let copy = &local_zips(&b_local)[0];
    let mut bytes = std::fs::read(copy).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(copy, &bytes).unwrap();
    let cut = crate::support::http::send_lenient(
        "damaged",
        client.get(b.url(&big_zip("1.0.0", &platform))),
    )
    .await;
    assert_ne!(cut.body, expected, "a damaged copy is never served whole");
    assert!(cut.body.len() < expected.len());
    assert_eq!(metric(&b, "corrupt").await, 1);
    let whole = get(&client, &b.url(&big_zip("1.0.0", &platform))).await;
    assert!(whole.status == 200 && whole.body == expected);
    assert_eq!(origin.count(RequestKind::Archive), 0);
}

/// A replica whose bucket is `shared`, a directory both mount (`cache.backend = "directory"`).
fn replica_on_directory(
    ca: &TestCa,
    dir: &Path,
    origin: std::net::SocketAddr,
    shared: &Path,
) -> ServerProcess {
    std::fs::create_dir_all(dir).unwrap();
    let cache = format!(
        "backend = \"directory\"\n\n[cache.object_store]\nbucket = \"{}\"\nprefix = \"mirror\"\n",
        path_str(shared)
    );
    spawn_replica(ca, dir, origin, &cache, "").0
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_on_a_store_with_conditional_creates_fetch_a_missed_archive_once() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let throttle = Throttle::start(origin.addr()).await;
    throttle.set_rate(4 * MIB as u64);
    let work = tempfile::tempdir().unwrap();
    let shared = work.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let a = replica_on_directory(&ca, &work.path().join("a"), throttle.addr(), &shared);
    let b = replica_on_directory(&ca, &work.path().join("b"), throttle.addr(), &shared);
    let client = https_client(&ca, &[]);
    let (os, arch) = platforms()[0];
    let platform = format!("{os}_{arch}");
    let role = async |replica: &ServerProcess, role: &str| {
        let metrics = get(&client, &replica.root_url("/metrics")).await.text();
        crate::support::sample(
            &metrics,
            &format!("provender_fleet_fills_total{{role=\"{role}\"}}"),
        )
    };

    // Four clients on each replica miss the same archive at once: one origin download.
    let expected = origin.archive("acme", "big", "1.0.0", os, arch);
    let mut downloads = Vec::new();
    for replica in [&a, &b, &a, &b, &a, &b, &a, &b] {
        let (client, url) = (client.clone(), replica.url(&big_zip("1.0.0", &platform)));
        downloads.push(tokio::spawn(async move { get(&client, &url).await }));
    }
    for d in downloads {
        let got = within("a concurrent miss", d).await.unwrap();
        assert_eq!(got.status, 200);
        assert!(
            got.body == expected,
            "every client gets the origin's archive"
        );
    }
    assert_eq!(
        origin.count(RequestKind::Archive),
        1,
        "one download for the fleet: {:?}",
        origin.requests()
    );
    let leaders = role(&a, "leader").await + role(&b, "leader").await;
    let followers = role(&a, "follower").await + role(&b, "follower").await;
    assert_eq!(
        (leaders, followers),
        (1, 1),
        "one replica led, the other followed"
    );
    assert_eq!(role(&a, "alone").await + role(&b, "alone").await, 0);
    let leases = shared.join("mirror/leases");
    poll(Duration::from_secs(10), async || {
        crate::support::provender::files_under(&leases)
            .is_empty()
            .then_some(())
    })
    .await
    .expect("the leader deleted its lease");

    // A dies holding the lease of another archive: B waits for the lease to go stale, takes it
    // over and serves the archive whole.
    kill_mid_download(&client, a, &big_zip("2.0.0", &platform)).await;
    assert!(
        !crate::support::provender::files_under(&leases).is_empty(),
        "the killed replica's lease is left behind"
    );
    let started = std::time::Instant::now();
    let got = within(
        "B's download",
        get(&client, &b.url(&big_zip("2.0.0", &platform))),
    )
    .await;
    assert_eq!(got.status, 200);
    assert!(got.body == origin.archive("acme", "big", "2.0.0", os, arch));
    assert_eq!(role(&b, "took_over").await, 1);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "B waited for the lease to stand still before taking it over"
    );
}

/// Two replicas publishing one version with other files at the same moment, on a store that
/// does not enforce conditional creates: one publication, the same archive from both, and
/// the other publisher told so; what one replica publishes the other serves, at every door.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_publishing_one_version_at_once_end_with_one_publication() {
    use crate::publishing::{module_tgz, relabelled, release, sha256, tar_of};
    use crate::support::http::send;
    use http::StatusCode;
    let garage = Garage::start("provender-publish");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let key = work.path().join("signing.asc");
    provender(&["keygen", "--provider-signing", "--output", path_str(&key)])
        .await
        .ok();
    const TOKEN: &str = "platform-team-token-0123456789";
    const HOST: &str = "registry.acme.test";
    let toml = format!(
        r#"[auth]
url_signing_key = "{signing}"

[[auth.clients]]
name = "platform"
token = "{TOKEN}"

[[auth.rules]]
name = "platform"
clients = ["platform"]
publish = ["acme/*"]

[publishing]
hostname = "{HOST}"
signing_key = "{key}"

[publishing.namespaces.acme]
"#,
        signing = "k".repeat(40),
        key = key.display(),
    );
    let (a, _) = replica_with(
        &ca,
        &work.path().join("a"),
        origin.addr(),
        &garage,
        "",
        &toml,
    );
    let (b, _) = replica_with(
        &ca,
        &work.path().join("b"),
        origin.addr(),
        &garage,
        "",
        &toml,
    );
    let client = https_client(&ca, &[]);
    let put = |replica: &ServerProcess, path: &str, body: Vec<u8>| {
        let req = client
            .put(replica.url(&format!("-/api/v1/publish/{path}")))
            .bearer_auth(TOKEN)
            .body(body);
        async move {
            let got = send("publish", req).await;
            let json: serde_json::Value = serde_json::from_slice(&got.body).unwrap_or_default();
            (got.status, json)
        }
    };
    let (first, second) = tokio::join!(
        put(
            &a,
            "providers/acme/foo/1.1.0",
            tar_of(&release(&origin, "1.1.0"))
        ),
        put(
            &b,
            "providers/acme/foo/1.1.0",
            tar_of(&relabelled(&origin, "1.0.0", "1.1.0"))
        ),
    );
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::CREATED, StatusCode::CONFLICT],
        "{first:?} {second:?}"
    );
    let winner = if first.0 == StatusCode::CREATED {
        &first.1
    } else {
        &second.1
    };
    let (os, arch) = tf_config::local_platform();
    let name = origin.filename("acme", "foo", "1.1.0", os, arch);
    let listed = winner["publication"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name.as_str())
        .unwrap()["sha256"]
        .clone();
    for replica in [&a, &b] {
        let got = send(
            "archive",
            client
                .get(replica.url(&format!("{HOST}/acme/foo/{name}")))
                .bearer_auth(TOKEN),
        )
        .await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(serde_json::json!(sha256(&got.body)), listed);
    }

    // Published on A, listed on B, at the network mirror, the module registry and OCI.
    let (status, body) = put(
        &a,
        "modules/acme/vpc/aws/1.0.0",
        module_tgz("variable \"cidr\" {\n  description = \"The range.\"\n}\n"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Its documentation, read from the package by A, is kept in the bucket beside it, and B
    // shows it.
    let docs_path = format!("-/api/v1/modules/{HOST}/acme/vpc/aws/1.0.0");
    let got = send("docs", client.get(a.url(&docs_path)).bearer_auth(TOKEN)).await;
    assert_eq!(
        got.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&got.body)
    );
    let storage = provender::storage::ObjectStorage::new(&garage.settings("mirror")).unwrap();
    let docs_key =
        provender::storage::Key::parse(&format!("modules/{HOST}/acme/vpc/aws/1.0.0/docs.json"))
            .unwrap();
    let kept = provender::storage::Storage::read(&storage, &docs_key)
        .await
        .unwrap();
    let kept: serde_json::Value =
        serde_json::from_slice(&kept.expect("docs.json in the bucket")).unwrap();
    assert_eq!(kept["docs"]["root"]["inputs"][0]["name"], "cidr");
    let shown = crate::support::poll(Duration::from_secs(15), async || {
        let got = send("docs", client.get(b.url(&docs_path)).bearer_auth(TOKEN)).await;
        (got.status == StatusCode::OK).then_some(got.body)
    })
    .await
    .expect("B shows the module A published");
    let shown: serde_json::Value = serde_json::from_slice(&shown).unwrap();
    assert_eq!(
        shown["docs"]["root"]["inputs"][0]["description"],
        "The range."
    );
    for path in [
        format!("{HOST}/acme/foo/index.json"),
        format!("v1/modules/{HOST}/acme/vpc/aws/versions"),
    ] {
        let got = send("list", client.get(b.url(&path)).bearer_auth(TOKEN)).await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
        let text = String::from_utf8(got.body).unwrap();
        assert!(
            text.contains("1.1.0") || text.contains("1.0.0"),
            "{path}: {text}"
        );
    }
    let got = send(
        "tags",
        client
            .get(b.root_url(&format!("/v2/{HOST}/acme/foo/tags/list")))
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert!(String::from_utf8_lossy(&got.body).contains("1.1.0"));
}
