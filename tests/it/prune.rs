//! `provender prune` end to end: the real binary on real caches (files and a Garage bucket),
//! with provender serving them in this process and the fake origin behind it. Age is simulated
//! by setting files' access and modification times into the past (on a bucket, by a short
//! `--unused-for` and a few seconds' wait).
//!
//! - an old, unused version goes (every platform of it, its records and SHA256SUMS copies);
//!   one served recently stays whole, even its platforms nobody asked for; module versions
//!   likewise;
//! - `--dry-run` changes nothing, not even access times, and decides exactly what the real run
//!   then does; `--json` parses; the table says what it did;
//! - `--keep` a lock file keeps exactly its versions; a configuration keeps what its
//!   constraints allow, its registry modules, and what those modules need in turn;
//! - afterwards `verify` finds nothing wrong, and the server fetches a removed archive or
//!   package again from the origin; offline, the removed versions leave the version lists and
//!   are answered 404;
//! - on an object store, a served archive's `.used` marker keeps it;
//! - a bad or missing `--unused-for` is a usage error naming the flag.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::support::cli::{Run, config_file, path_str, provender, sealed_config};
use crate::support::garage::Garage;
use crate::support::http::get;
use crate::support::origin::{FakeOrigin, ModuleSpec, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, files_under, write_config};
use crate::support::tf_config::root_module;
use crate::support::{eventually, https_client};

const DAY: Duration = Duration::from_secs(86_400);

const PLATFORMS: [&str; 2] = ["linux_amd64", "darwin_arm64"];

/// `acme/rel/test` requires this provider version (and calls `acme/leaf/test`).
const REL_NEEDS: &str = "terraform {\n  required_providers {\n    foo = { source = \"acme/foo\", version = \"2.0.0\" }\n  }\n}\n";

async fn origin(ca: &TestCa) -> FakeOrigin {
    let p = [("linux", "amd64"), ("darwin", "arm64")];
    FakeOrigin::start_with_modules(
        ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0", "2.0.0"], &p),
            ProviderSpec::new("acme", "bar", &["2.2.0", "2.3.0"], &p),
        ],
        vec![
            ModuleSpec::new("acme", "net", "test", &["1.0.0", "1.1.0", "2.0.0"]),
            ModuleSpec::new("acme", "rel", "test", &["1.0.0"])
                .with_child("acme/leaf/test", "1.0.0")
                .with_file("versions.tf", REL_NEEDS),
            ModuleSpec::new("acme", "leaf", "test", &["1.0.0"]),
            ModuleSpec::new("acme", "other", "test", &["1.0.0"]),
        ],
    )
    .await
}

/// Every provider version and module version the origin serves, as seed arguments.
const PROVIDERS: [&str; 5] = [
    "acme/foo@1.0.0",
    "acme/foo@1.1.0",
    "acme/foo@2.0.0",
    "acme/bar@2.2.0",
    "acme/bar@2.3.0",
];
const MODULES: [&str; 6] = [
    "acme/net/test@1.0.0",
    "acme/net/test@1.1.0",
    "acme/net/test@2.0.0",
    "acme/rel/test@1.0.0",
    "acme/leaf/test@1.0.0",
    "acme/other/test@1.0.0",
];

/// Seeds `providers` for both platforms, and `modules`.
async fn seed(cfg: &str, providers: &[&str], modules: &[&str]) {
    let mut args = vec!["seed", "--config", cfg];
    for p in PLATFORMS {
        args.extend(["--platform", p]);
    }
    for p in providers {
        args.extend(["--provider", p]);
    }
    for m in modules {
        args.extend(["--module", m]);
    }
    provender(&args).await.ok();
}

/// `provender prune --config <cfg> <args>`.
async fn prune(cfg: &str, args: &[&str]) -> Run {
    let mut all = vec!["prune", "--config", cfg];
    all.extend(args);
    provender(&all).await
}

/// The JSON a `prune --json` run printed.
fn report(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("prune --json printed no JSON ({e}):\n{}", run.out()))
}

/// One line per entry of a report's `removed` or `kept`: `foo 1.0.0 linux_amd64` for an
/// archive, `foo 1.0.0` for a kept provider version, `module net 1.0.0` for a module version
/// (addresses without `registry.terraform.io/acme/`).
fn entries(report: &Value, field: &str) -> BTreeSet<String> {
    let short = |v: &Value| {
        v.as_str()
            .unwrap()
            .trim_start_matches(&format!("{REGISTRY}/acme/"))
            .trim_end_matches("/test")
            .to_string()
    };
    report[field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field} in {report}"))
        .iter()
        .map(|e| match e["kind"].as_str() {
            Some("provider") => {
                let platform = e["platform"].as_str().map(|p| format!(" {p}"));
                format!(
                    "{} {}{}",
                    short(&e["provider"]),
                    e["version"].as_str().unwrap(),
                    platform.unwrap_or_default()
                )
            }
            Some("module") => format!(
                "module {} {}",
                short(&e["module"]),
                e["version"].as_str().unwrap()
            ),
            _ => panic!("an entry of unknown kind: {e}"),
        })
        .collect()
}

/// `foo 1.0.0 linux_amd64` and `foo 1.0.0 darwin_arm64` for each `foo 1.0.0`.
fn archives_of(versions: &[&str]) -> Vec<String> {
    versions
        .iter()
        .flat_map(|v| PLATFORMS.iter().map(move |p| format!("{v} {p}")))
        .collect()
}

fn set(items: impl IntoIterator<Item = impl Into<String>>) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

/// Sets the access and modification times of every file under `dir` to `at`.
fn set_times(dir: &Path, at: SystemTime) {
    for path in files_under(dir) {
        set_file_times(&path, at);
    }
}

fn set_file_times(path: &Path, at: SystemTime) {
    std::fs::File::open(path)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_accessed(at).set_modified(at))
        .unwrap();
}

/// Makes every cached archive and module package look stored, and last used, `age` ago.
fn age_cache(cache: &Path, age: Duration) {
    let then = SystemTime::now() - age;
    set_times(&cache.join("archives"), then);
    set_times(&cache.join("modules"), then);
}

/// Every file of a cache (but `tmp/`) with its size and times, read without reading any file
/// (a read could change an access time).
fn stat(cache: &Path) -> Vec<(PathBuf, u64, SystemTime, SystemTime)> {
    files_under(cache)
        .into_iter()
        .filter(|p| !p.starts_with(cache.join("tmp")))
        .map(|p| {
            let m = std::fs::metadata(&p).unwrap();
            (p, m.len(), m.modified().unwrap(), m.accessed().unwrap())
        })
        .collect()
}

fn zip_path(cache: &Path, ty: &str, version: &str, platform: &str) -> PathBuf {
    cache.join(format!(
        "archives/{REGISTRY}/acme/{ty}/{version}/terraform-provider-{ty}_{version}_{platform}.zip"
    ))
}

fn package_path(cache: &Path, name: &str, version: &str) -> PathBuf {
    cache.join(format!(
        "modules/{REGISTRY}/acme/{name}/test/{version}/module.tar.gz"
    ))
}

fn metadata_of(cache: &Path, ty: &str) -> PathBuf {
    cache.join(format!("metadata/{REGISTRY}/acme/{ty}"))
}

fn zip_url(ty: &str, version: &str, platform: &str) -> String {
    format!("{REGISTRY}/acme/{ty}/terraform-provider-{ty}_{version}_{platform}.zip")
}

fn package_url(name: &str, version: &str) -> String {
    format!("v1/modules/{REGISTRY}/acme/{name}/test/{version}/module.tar.gz")
}

/// Whether `path` was last accessed within the last minute.
fn used_just_now(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.accessed())
        .is_ok_and(|t| t > SystemTime::now() - Duration::from_secs(60))
}

/// A cache seeded with [`PROVIDERS`] and [`MODULES`] from a fresh origin, everything last
/// used `age` ago.
struct Seeded {
    ca: TestCa,
    origin: FakeOrigin,
    work: tempfile::TempDir,
    cache: PathBuf,
    cfg: PathBuf,
}

async fn seeded(age: Duration) -> Seeded {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let cfg = config_file(
        work.path(),
        "provender.toml",
        &cache,
        origin.addr(),
        &ca,
        "",
    );
    seed(path_str(&cfg), &PROVIDERS, &MODULES).await;
    age_cache(&cache, age);
    Seeded {
        ca,
        origin,
        work,
        cache,
        cfg,
    }
}

/// `verify` on a pruned cache: every archive and package has its record and matches it.
async fn verify_finds_nothing_wrong(cfg: &str) {
    let verified = provender(&["verify", "--config", cfg]).await;
    verified.ok();
    assert!(
        verified.stdout.contains(" 0 failed") && !verified.stdout.contains("failed ("),
        "{}",
        verified.out()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unused_versions_go_and_served_ones_stay() {
    let Seeded {
        ca,
        origin,
        work: _work,
        cache,
        cfg,
    } = seeded(100 * DAY).await;
    let cfg = path_str(&cfg);

    // Clients use one platform of foo 1.1.0 and one version of the net module.
    let mut mirror = TestMirror::start_on(&ca, &origin, &cache).await;
    let client = https_client(&ca, &[]);
    for url in [
        zip_url("foo", "1.1.0", "linux_amd64"),
        package_url("net", "1.1.0"),
    ] {
        let got = get(&client, &mirror.url(&url)).await;
        assert_eq!(got.status, 200, "{url}: {}", got.text());
    }
    let served = [
        zip_path(&cache, "foo", "1.1.0", "linux_amd64"),
        package_path(&cache, "net", "1.1.0"),
    ];
    eventually(
        "the server records the use of what it served",
        Duration::from_secs(10),
        || served.iter().all(|p| used_just_now(p)),
    )
    .await;
    let ls = provender(&["ls", "--config", cfg, "--json"]).await;
    ls.ok();
    let rows: Vec<Value> = serde_json::from_str(&ls.stdout).unwrap();
    let foo_110 = rows
        .iter()
        .find(|r| r["version"] == "1.1.0" && r["platform"] == "linux_amd64")
        .unwrap_or_else(|| panic!("{}", ls.stdout));
    let stamp = foo_110["last_used"].as_str().unwrap();
    assert!(
        humantime::parse_rfc3339(stamp).unwrap() > SystemTime::now() - DAY,
        "ls shows the last use: {foo_110}"
    );

    // The dry run changes nothing, not even an access time.
    let before = stat(&cache);
    let dry = prune(cfg, &["--unused-for", "90d", "--dry-run", "--json"]).await;
    dry.ok();
    let dry = report(&dry);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["unused_for"], "90d");
    let expected: BTreeSet<String> =
        archives_of(&["foo 1.0.0", "foo 2.0.0", "bar 2.2.0", "bar 2.3.0"])
            .into_iter()
            .chain([
                "module net 1.0.0".into(),
                "module net 2.0.0".into(),
                "module rel 1.0.0".into(),
                "module leaf 1.0.0".into(),
                "module other 1.0.0".into(),
            ])
            .collect();
    assert_eq!(entries(&dry, "removed"), expected, "{dry:#}");
    assert!(entries(&dry, "kept").is_empty(), "nothing was --keep'd");
    let sizes: u64 = dry["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["size"].as_u64().unwrap())
        .sum();
    assert_eq!(dry["bytes_freed"].as_u64(), Some(sizes));
    let table = prune(cfg, &["--unused-for", "90d", "--dry-run"]).await;
    table.ok();
    for expected in [
        "prune (dry run): nothing is changed",
        "LAST USED",
        "8 archives of 4 provider versions and 5 module versions unused for 90d would be removed",
        "would be freed",
    ] {
        assert!(
            table.stdout.contains(expected),
            "{expected}:\n{}",
            table.out()
        );
    }
    for row in [
        format!("{REGISTRY}/acme/bar"),
        "darwin_arm64".into(),
        format!("module {REGISTRY}/acme/other/test"),
    ] {
        assert!(table.stdout.contains(&row), "{row}:\n{}", table.out());
    }
    assert!(!table.stdout.contains("1.1.0"), "{}", table.out());
    assert_eq!(stat(&cache), before, "a dry run changes nothing");

    // The real run does exactly what the dry run said.
    let run = prune(cfg, &["--unused-for", "90d", "--json"]).await;
    run.ok();
    let done = report(&run);
    assert_eq!(done["dry_run"], false);
    assert_eq!(entries(&done, "removed"), entries(&dry, "removed"));
    assert_eq!(done["bytes_freed"], dry["bytes_freed"]);
    assert!(done["failed"].as_array().unwrap().is_empty(), "{done:#}");

    // Gone: every platform of each removed version, its records, its SHA256SUMS copies.
    for (ty, version) in [
        ("foo", "1.0.0"),
        ("foo", "2.0.0"),
        ("bar", "2.2.0"),
        ("bar", "2.3.0"),
    ] {
        for p in PLATFORMS {
            let zip = zip_path(&cache, ty, version, p);
            assert!(!zip.exists(), "{}", zip.display());
            assert!(!zip.with_extension("zip.json").exists());
        }
        let meta = files_under(&metadata_of(&cache, ty));
        assert!(
            meta.iter().all(|f| {
                let name = f.file_name().unwrap().to_str().unwrap();
                !name.starts_with(&format!("{version}."))
            }),
            "{ty} {version}: {meta:?}"
        );
    }
    // Kept whole: the version a client used, with the platform nobody asked for.
    for p in PLATFORMS {
        assert!(zip_path(&cache, "foo", "1.1.0", p).exists());
        assert!(
            zip_path(&cache, "foo", "1.1.0", p)
                .with_extension("zip.json")
                .exists()
        );
    }
    assert!(metadata_of(&cache, "foo").join("1.1.0.json").exists());
    assert!(
        metadata_of(&cache, "foo").join("index.json").exists(),
        "with an origin, the version list is the origin's"
    );
    for (name, version, kept) in [
        ("net", "1.0.0", false),
        ("net", "1.1.0", true),
        ("net", "2.0.0", false),
        ("rel", "1.0.0", false),
        ("other", "1.0.0", false),
    ] {
        let package = package_path(&cache, name, version);
        assert_eq!(package.exists(), kept, "{}", package.display());
        assert_eq!(package.with_file_name("module.json").exists(), kept);
    }
    verify_finds_nothing_wrong(cfg).await;

    // The server, still running, fetches what was removed again, and serves what stayed.
    origin.reset_counts();
    let got = get(
        &client,
        &mirror.url(&zip_url("foo", "1.0.0", "linux_amd64")),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(got.body == origin.archive("acme", "foo", "1.0.0", "linux", "amd64"));
    let got = get(&client, &mirror.url(&package_url("net", "2.0.0"))).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(origin.count(RequestKind::Archive), 1);
    assert_eq!(origin.count(RequestKind::ModuleArchive), 1);
    for p in PLATFORMS {
        let url = zip_url("foo", "1.1.0", p);
        assert_eq!(get(&client, &mirror.url(&url)).await.status, 200, "{url}");
    }
    assert_eq!(
        origin.count(RequestKind::Archive),
        1,
        "kept: served from the cache"
    );
    mirror.stop().await;
    verify_finds_nothing_wrong(cfg).await;

    // What is left was all used within the period: a second run removes nothing.
    let again = prune(cfg, &["--unused-for", "90d", "--json"]).await;
    again.ok();
    assert!(
        entries(&report(&again), "removed").is_empty(),
        "{}",
        again.out()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn keep_pins_what_lock_files_and_configurations_name() {
    let Seeded {
        ca: _ca,
        origin: _origin,
        work,
        cache,
        cfg,
    } = seeded(400 * DAY).await;
    let cfg = path_str(&cfg);

    // A lock file pins foo 1.0.0 only, though its recorded constraint allows 1.1.0 too.
    let stack = tempfile::tempdir().unwrap();
    let lock = stack.path().join(".terraform.lock.hcl");
    std::fs::write(
        &lock,
        format!(
            "provider \"{REGISTRY}/acme/foo\" {{\n  version     = \"1.0.0\"\n  constraints = \"~> 1.0\"\n  hashes = [\n    \"zh:00\",\n  ]\n}}\n"
        ),
    )
    .unwrap();
    let lock = path_str(&lock);
    // A configuration that was never initialised: bar by constraint, net by constraint, rel
    // exactly; rel calls leaf and requires foo 2.0.0.
    let infra = root_module(
        "terraform {\n  required_providers {\n    bar = { source = \"acme/bar\", version = \">= 2.3.0\" }\n  }\n}\n\n\
         module \"net\" {\n  source  = \"acme/net/test\"\n  version = \"~> 1.0\"\n}\n\n\
         module \"rel\" {\n  source  = \"acme/rel/test\"\n  version = \"1.0.0\"\n}\n",
    );
    let infra = path_str(infra.path());
    let every_archive = archives_of(&[
        "foo 1.0.0",
        "foo 1.1.0",
        "foo 2.0.0",
        "bar 2.2.0",
        "bar 2.3.0",
    ]);
    let every_module = MODULES.map(|m| {
        let (addr, version) = m.split_once('@').unwrap();
        let name = addr.trim_start_matches("acme/").trim_end_matches("/test");
        format!("module {name} {version}")
    });
    let removed_unless = |kept: &[&str]| -> BTreeSet<String> {
        every_archive
            .iter()
            .chain(every_module.iter())
            .filter(|e| {
                !kept
                    .iter()
                    .any(|k| e.starts_with(&format!("{k} ")) || e == k)
            })
            .cloned()
            .collect()
    };

    // The lock file alone: exactly its version.
    let dry = prune(
        cfg,
        &["--unused-for", "1y", "--keep", lock, "--dry-run", "--json"],
    )
    .await;
    dry.ok();
    let dry = report(&dry);
    assert_eq!(entries(&dry, "kept"), set(["foo 1.0.0"]), "{dry:#}");
    assert_eq!(entries(&dry, "removed"), removed_unless(&["foo 1.0.0"]));

    // The configuration alone: what its constraints allow, its modules, and their needs.
    let from_config = [
        "foo 2.0.0",
        "bar 2.3.0",
        "module net 1.0.0",
        "module net 1.1.0",
        "module rel 1.0.0",
        "module leaf 1.0.0",
    ];
    let dry = prune(
        cfg,
        &["--unused-for", "1y", "--keep", infra, "--dry-run", "--json"],
    )
    .await;
    dry.ok();
    let dry = report(&dry);
    assert_eq!(entries(&dry, "kept"), set(from_config), "{dry:#}");
    assert_eq!(entries(&dry, "removed"), removed_unless(&from_config));

    // Both, for real.
    let run = prune(
        cfg,
        &["--unused-for", "1y", "--keep", lock, "--keep", infra],
    )
    .await;
    run.ok();
    assert!(
        run.stdout
            .contains("kept by --keep, though unused for 1y (7):"),
        "{}",
        run.out()
    );
    for (ty, version, kept) in [
        ("foo", "1.0.0", true),
        ("foo", "1.1.0", false),
        ("foo", "2.0.0", true),
        ("bar", "2.2.0", false),
        ("bar", "2.3.0", true),
    ] {
        for p in PLATFORMS {
            let zip = zip_path(&cache, ty, version, p);
            assert_eq!(zip.exists(), kept, "{}", zip.display());
        }
        let record = metadata_of(&cache, ty).join(format!("{version}.json"));
        assert_eq!(record.exists(), kept, "{}", record.display());
    }
    for (name, version, kept) in [
        ("net", "1.0.0", true),
        ("net", "1.1.0", true),
        ("net", "2.0.0", false),
        ("rel", "1.0.0", true),
        ("leaf", "1.0.0", true),
        ("other", "1.0.0", false),
    ] {
        let package = package_path(&cache, name, version);
        assert_eq!(package.exists(), kept, "{}", package.display());
    }
    verify_finds_nothing_wrong(cfg).await;

    // A pin that cannot be read stops the run before anything is removed.
    let before = stat(&cache);
    let missing = work.path().join("no-such.lock.hcl");
    let bad = prune(cfg, &["--unused-for", "1d", "--keep", path_str(&missing)]).await;
    bad.fails(78);
    assert!(bad.stderr.contains("no-such.lock.hcl"), "{}", bad.out());
    assert_eq!(stat(&cache), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn offline_the_removed_versions_leave_the_lists_and_are_not_found() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let online = config_file(work.path(), "online.toml", &cache, origin.addr(), &ca, "");
    seed(
        path_str(&online),
        &["acme/foo@1.0.0", "acme/foo@1.1.0", "acme/bar@2.2.0"],
        &[
            "acme/net/test@1.0.0",
            "acme/net/test@1.1.0",
            "acme/other/test@1.0.0",
        ],
    )
    .await;
    age_cache(&cache, 60 * DAY);
    // Used a week ago.
    let week_ago = SystemTime::now() - 7 * DAY;
    set_file_times(&zip_path(&cache, "foo", "1.1.0", "darwin_arm64"), week_ago);
    set_file_times(&package_path(&cache, "net", "1.1.0"), week_ago);

    let sealed = sealed_config(work.path(), "sealed.toml", &cache, &ca);
    let sealed = path_str(&sealed);
    let run = prune(sealed, &["--unused-for", "30d", "--json"]).await;
    run.ok();
    let done = report(&run);
    let expected: BTreeSet<String> = archives_of(&["foo 1.0.0", "bar 2.2.0"])
        .into_iter()
        .chain(["module net 1.0.0".into(), "module other 1.0.0".into()])
        .collect();
    assert_eq!(entries(&done, "removed"), expected, "{done:#}");

    // The cached version lists (the origin's, as last fetched) no longer offer them; a list
    // left empty goes.
    let listed = |path: PathBuf| -> Vec<String> {
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        doc["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.get("version").unwrap_or(v).as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        listed(metadata_of(&cache, "foo").join("index.json")),
        ["1.1.0", "2.0.0"]
    );
    assert_eq!(
        listed(metadata_of(&cache, "bar").join("index.json")),
        ["2.3.0"]
    );
    let modules = cache.join(format!("modules/{REGISTRY}/acme"));
    assert_eq!(
        listed(modules.join("net/test/versions.json")),
        ["1.1.0", "2.0.0"]
    );
    assert!(!modules.join("other/test/versions.json").exists());
    verify_finds_nothing_wrong(sealed).await;

    // A sealed server on the pruned cache: 404 for what went, the rest as before.
    let closed = "127.0.0.1:9".parse().unwrap();
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            cache_dir: Some(&cache),
            connect_to: Some(closed),
            extra_upstream: "offline = true",
            ..Default::default()
        },
    )
    .await;
    origin.reset_counts();
    let client = https_client(&ca, &[]);
    let index = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    assert_eq!(index.status, 200);
    let versions: Vec<String> = index.json()["versions"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(versions, ["1.1.0", "2.0.0"], "{}", index.text());
    for (path, status) in [
        (format!("{REGISTRY}/acme/foo/1.0.0.json"), 404),
        (zip_url("foo", "1.0.0", "linux_amd64"), 404),
        (format!("{REGISTRY}/acme/bar/2.2.0.json"), 404),
        (zip_url("bar", "2.2.0", "darwin_arm64"), 404),
        (package_url("net", "1.0.0"), 404),
        (format!("{REGISTRY}/acme/foo/1.1.0.json"), 200),
        (zip_url("foo", "1.1.0", "linux_amd64"), 200),
        (package_url("net", "1.1.0"), 200),
    ] {
        let got = get(&client, &mirror.url(&path)).await;
        assert_eq!(got.status, status, "{path}: {}", got.text());
    }
    let module_versions = get(
        &client,
        &mirror.url(&format!("v1/modules/{REGISTRY}/acme/net/test/versions")),
    )
    .await;
    assert_eq!(module_versions.status, 200);
    assert_eq!(
        module_versions.json()["modules"][0]["versions"],
        serde_json::json!([{"version": "1.1.0"}, {"version": "2.0.0"}])
    );
    assert_eq!(
        origin.total_requests(),
        0,
        "offline: the origin is never asked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_an_object_store_a_served_archive_is_kept_by_its_marker() {
    let garage = Garage::start("provender-prune");
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let bucket = garage.cache_toml(work.path(), "mirror");
    let opts = MirrorOptions {
        extra_cache: &bucket,
        ..Default::default()
    };
    let cfg = write_config(&ca, work.path(), origin.addr(), &opts);
    let cfg = path_str(&cfg);
    seed(
        cfg,
        &["acme/foo@1.0.0", "acme/foo@1.1.0"],
        &["acme/net/test@1.0.0"],
    )
    .await;
    // Object stores set their own times: let the seeded objects grow older than the period.
    tokio::time::sleep(Duration::from_secs(4)).await;

    let mirror = TestMirror::start_with(&ca, &origin, opts).await;
    let client = https_client(&ca, &[]);
    let got = get(
        &client,
        &mirror.url(&zip_url("foo", "1.1.0", "darwin_arm64")),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
    let storage = provender::storage::ObjectStorage::new(&garage.settings("mirror")).unwrap();
    let archives = provender::storage::Key::parse("archives").unwrap();
    let marked = crate::support::poll(Duration::from_secs(10), async || {
        let listed = provender::storage::Storage::list(&storage, &archives)
            .await
            .unwrap();
        listed
            .iter()
            .any(|m| m.key.as_str().ends_with("darwin_arm64.zip") && m.last_used.is_some())
            .then_some(listed)
    })
    .await
    .expect("the served archive's use is recorded in the bucket");
    assert!(
        marked.iter().all(|m| !m.key.as_str().ends_with(".used")),
        "markers are never listed as objects: {marked:?}"
    );

    let run = prune(cfg, &["--unused-for", "3s", "--json"]).await;
    run.ok();
    let expected: BTreeSet<String> = archives_of(&["foo 1.0.0"])
        .into_iter()
        .chain(["module net 1.0.0".into()])
        .collect();
    assert_eq!(entries(&report(&run), "removed"), expected, "{}", run.out());
    let left: Vec<String> = provender::storage::Storage::list(&storage, &archives)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key.to_string())
        .collect();
    assert_eq!(left.len(), 4, "foo 1.1.0's two zips and records: {left:?}");
    assert!(left.iter().all(|k| k.contains("/1.1.0/")), "{left:?}");
    verify_finds_nothing_wrong(cfg).await;
    // Fetched again when asked for.
    let got = get(
        &client,
        &mirror.url(&zip_url("foo", "1.0.0", "linux_amd64")),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_or_missing_period_is_a_usage_error_naming_the_flag() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let cfg = sealed_config(work.path(), "sealed.toml", &cache, &ca);
    let cfg = path_str(&cfg);
    for (args, says) in [
        (
            vec!["--unused-for", "ninety days"],
            "--unused-for \"ninety days\"",
        ),
        (vec!["--unused-for", "90"], "--unused-for \"90\""),
        (vec!["--unused-for", "0s"], "longer than zero"),
        (vec!["--dry-run"], "give --unused-for"),
    ] {
        let run = prune(cfg, &args).await;
        run.fails(78);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.out());
        assert!(
            run.stderr.contains("--unused-for"),
            "{args:?}: {}",
            run.out()
        );
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.out());
    }
    // The help says what counts as a use.
    let help = provender(&["prune", "--help"]).await;
    help.ok();
    for expected in [
        "--unused-for",
        "--keep",
        "--dry-run",
        "access time",
        "marker",
    ] {
        assert!(
            help.stdout.contains(expected),
            "{expected}: {}",
            help.stdout
        );
    }
}
