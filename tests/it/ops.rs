//! The operator commands end to end: the real `provender` binary against the fake origin, and
//! the real `terraform` CLI consuming what they produce.
//!
//! - the air gap: `seed` from a configuration and a lock file, `export --bundle` and a mirror
//!   directory, `import` into empty caches (twice: a no-op), serve sealed with the origin
//!   stopped, `terraform init` in a fresh directory;
//! - `lock` writes the same file, byte for byte, as `terraform providers lock` straight from the
//!   origin, and `terraform init` accepts it;
//! - an exported directory served by nginx works as a `network_mirror`;
//! - a `terraform providers mirror` directory imports and serves sealed;
//! - `import` refuses tampered bundles and directories and leaves the cache as it was, and a
//!   bundle with a tar header declaring 256 MiB without its memory growing by it;
//! - `ls`, `verify` (quarantine of a damaged archive), failures reported with non-zero exits;
//! - `verify` and `import` hash archives within the configured zip limits.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

#[cfg(target_os = "linux")]
use crate::support::cli::provender_with_peak_memory;
use crate::support::cli::{
    config_file, export_bundle, import, import_unverified, path_str, provender, sealed_config,
    seed, snapshot, tamper, zips,
};
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec, RequestKind};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, files_under};
use crate::support::static_server::StaticServer;
use crate::support::tf_config::{self, FOO_BAR_DIRS, local_platform_and, root_module};
use crate::support::{Terraform, init_fresh};

/// The local platform plus two others, as `(os, arch)` pairs.
fn platforms() -> Vec<(&'static str, &'static str)> {
    local_platform_and(&[("linux", "amd64"), ("darwin", "arm64")])
}

async fn origin(ca: &TestCa) -> FakeOrigin {
    let p = platforms();
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0", "2.0.0-beta.1"], &p),
            ProviderSpec::new("acme", "bar", &["2.2.0", "2.3.0"], &p),
            ProviderSpec::new("acme", "dirs", &["0.1.0"], &p),
        ],
    )
    .await
}

/// A CA, the origin, a work directory, and in it `provender.toml` for a cache at `work/cache`
/// that fetches from the origin.
struct Connected {
    ca: TestCa,
    origin: FakeOrigin,
    work: TempDir,
    cache: PathBuf,
    cfg: PathBuf,
}

async fn connected() -> Connected {
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
    Connected {
        ca,
        origin,
        work,
        cache,
        cfg,
    }
}

/// `<flag>=<os>_<arch>` for each of [`platforms`]: `--platform` for provender, `-platform`
/// for terraform.
fn platform_args(flag: &str) -> Vec<String> {
    platforms()
        .iter()
        .map(|(o, a)| format!("{flag}={o}_{a}"))
        .collect()
}

/// CLI configuration sending terraform straight to the origin.
fn origin_cli_config(origin: &FakeOrigin) -> String {
    tf_config::registry_host(&origin.providers_v1_url())
}

/// Serves `cache` sealed (offline, the origin stopped for good) and runs `terraform init` from
/// it in a fresh root module, which is returned.
async fn init_from_sealed_cache(ca: &TestCa, origin: FakeOrigin, cache: &Path) -> TempDir {
    let mut mirror = TestMirror::start_with(
        ca,
        &origin,
        MirrorOptions {
            extra_upstream: "offline = true",
            cache_dir: Some(cache),
            ..Default::default()
        },
    )
    .await;
    origin.stop().await;
    let cli = tf_config::network_mirror(mirror.url.as_str());
    let fresh = init_fresh(ca, &cli, FOO_BAR_DIRS).await;
    mirror.stop().await;
    fresh
}

/// The archives a seed of [`FOO_BAR_DIRS`] plus `bar 2.3.0` fetches.
fn expected_zips() -> Vec<String> {
    let mut out = Vec::new();
    for (ty, v) in [("foo", "1.1.0"), ("bar", "2.3.0"), ("dirs", "0.1.0")] {
        for (os, arch) in platforms() {
            out.push(format!("terraform-provider-{ty}_{v}_{os}_{arch}.zip"));
        }
    }
    out.sort();
    out
}

const BAR_LOCK: &str = r#"# This file is maintained automatically by "terraform init".
# Manual edits may be lost in future updates.

provider "registry.terraform.io/acme/bar" {
  version = "2.3.0"
  hashes = [
    "zh:0000000000000000000000000000000000000000000000000000000000000000",
  ]
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn air_gap_seed_export_import_and_serve_sealed() {
    let Connected {
        ca,
        origin,
        work,
        cache: connected,
        cfg,
    } = connected().await;
    let cfg = path_str(&cfg);

    // A configuration directory (constraints) and a lock file (exact version) together; the
    // configuration asks for bar too, but without a constraint: the lock file pins 2.3.0.
    let tf_dir = root_module(&FOO_BAR_DIRS.replace("    bar  = { source = \"acme/bar\" }\n", ""));
    let lock_dir = tempfile::tempdir().unwrap();
    let lock = lock_dir.path().join(".terraform.lock.hcl");
    std::fs::write(&lock, BAR_LOCK).unwrap();
    let mut args = vec!["seed", "--config", cfg];
    let platform_args = platform_args("--platform");
    args.extend(platform_args.iter().map(String::as_str));
    args.extend([path_str(tf_dir.path()), path_str(&lock)]);
    let seeded = provender(&args).await;
    seeded.ok();
    let n = expected_zips().len();
    assert!(
        seeded.stdout.contains(&format!("seed: {n} added")),
        "{}",
        seeded.stdout
    );
    assert_eq!(zips(&connected.join("archives")), expected_zips());
    assert_eq!(origin.count(RequestKind::Archive), n);
    // The prerelease 2.0.0-beta.1 is newer, but "~> 1.0" does not name it: 1.1.0 was chosen.
    assert!(
        seeded.stdout.contains("acme/foo 1.1.0"),
        "{}",
        seeded.stdout
    );

    // Seeding again fetches nothing.
    let again = provender(&args).await;
    again.ok();
    assert!(
        again.stdout.contains(&format!(
            "seed: 0 added (0 B), {n} already present, 0 failed"
        )),
        "{}",
        again.stdout
    );
    assert_eq!(origin.count(RequestKind::Archive), n);

    // ls shows what is there.
    let ls = provender(&["ls", "--config", cfg]).await;
    ls.ok();
    assert!(
        ls.stdout
            .contains(&format!("{n} archives, 3 provider versions, 3 providers")),
        "{}",
        ls.stdout
    );
    assert!(
        ls.stdout.contains("registry.terraform.io/acme/dirs  0.1.0"),
        "{}",
        ls.stdout
    );

    // Export both ways.
    let bundle = work.path().join("providers.tar");
    export_bundle(cfg, &bundle).await;
    let exported = work.path().join("mirror");
    provender(&["export", "--config", cfg, path_str(&exported)])
        .await
        .ok();
    assert_eq!(zips(&exported), expected_zips());
    let version_doc: serde_json::Value = serde_json::from_slice(
        &std::fs::read(exported.join(REGISTRY).join("acme/foo/1.1.0.json")).unwrap(),
    )
    .unwrap();
    let (os, arch) = &platforms()[0];
    let hashes = &version_doc["archives"][format!("{os}_{arch}")]["hashes"];
    assert_eq!(
        hashes,
        &serde_json::json!([
            origin.h1_zip("acme", "foo", "1.1.0", os, arch),
            format!("zh:{}", origin.sha256_hex("acme", "foo", "1.1.0", os, arch))
        ])
    );
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(exported.join(REGISTRY).join("acme/foo/index.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(index, serde_json::json!({ "versions": { "1.1.0": {} } }));

    // The exported directory is also a filesystem mirror as it stands.
    init_fresh(&ca, &tf_config::filesystem_mirror(&exported), FOO_BAR_DIRS).await;

    // Carry the bundle across: import into an empty, sealed cache. Twice: the second is a no-op.
    let sealed = work.path().join("sealed-cache");
    let sealed_cfg = sealed_config(work.path(), "sealed.toml", &sealed, &ca);
    let sealed_cfg = path_str(&sealed_cfg);
    let first = import(sealed_cfg, &bundle).await;
    first.ok();
    assert!(
        first.stdout.contains(&format!("import: {n} added")),
        "{}",
        first.stdout
    );
    assert!(
        first.stdout.contains("signed by trusted site key")
            && first
                .stdout
                .contains(&format!("trust levels: {n} community")),
        "{}",
        first.stdout
    );
    let before = snapshot(&sealed);
    let second = import(sealed_cfg, &bundle).await;
    second.ok();
    assert!(
        second
            .stdout
            .contains(&format!("import: 0 added (0 B), {n} already present")),
        "{}",
        second.stdout
    );
    assert_eq!(
        snapshot(&sealed),
        before,
        "importing the same bundle twice changes nothing"
    );

    // The exported directory imports as well.
    let from_dir = work.path().join("dir-cache");
    let dir_cfg = sealed_config(work.path(), "dir.toml", &from_dir, &ca);
    let refused = import(path_str(&dir_cfg), &exported).await;
    refused.fails(1);
    assert!(
        refused.out().contains("--allow-unverified"),
        "{}",
        refused.out()
    );
    import_unverified(path_str(&dir_cfg), &exported).await.ok();
    assert_eq!(zips(&from_dir.join("archives")), expected_zips());

    // Serve the bundle's cache sealed, with the origin gone, and install from it.
    let fresh = init_from_sealed_cache(&ca, origin, &sealed).await;
    let lock = std::fs::read_to_string(fresh.path().join(".terraform.lock.hcl")).unwrap();
    assert!(lock.contains("version     = \"1.1.0\""), "{lock}");
}

#[tokio::test(flavor = "multi_thread")]
async fn lock_writes_what_terraform_writes_and_init_accepts_it() {
    let Connected {
        ca,
        origin,
        work: _work,
        cache,
        cfg,
    } = connected().await;

    // Terraform's own lock file, straight from the origin, for the same platforms.
    let theirs = root_module(FOO_BAR_DIRS);
    let direct = Terraform::new(&ca, &origin_cli_config(&origin));
    let tf_platforms = platform_args("-platform");
    let mut args = vec!["providers", "lock", "-no-color"];
    args.extend(tf_platforms.iter().map(String::as_str));
    direct.run(theirs.path(), &args).await.assert_success();
    let expected = std::fs::read_to_string(theirs.path().join(".terraform.lock.hcl")).unwrap();

    // provender's, from an empty cache (it fetches what is missing).
    let ours = root_module(FOO_BAR_DIRS);
    let mut args = vec!["lock", "--config", path_str(&cfg)];
    let platform_args = platform_args("--platform");
    args.extend(platform_args.iter().map(String::as_str));
    args.push(path_str(ours.path()));
    let locked = provender(&args).await;
    locked.ok();
    let written = std::fs::read_to_string(ours.path().join(".terraform.lock.hcl")).unwrap();
    assert_eq!(
        written, expected,
        "provender lock vs terraform providers lock"
    );
    // Every requested platform's h1 is the one Terraform computes (for `dirs`, of the package as
    // extracted, which differs from the zip's own h1).
    for (os, arch) in platforms() {
        for (ty, v) in [("foo", "1.1.0"), ("bar", "2.3.0"), ("dirs", "0.1.0")] {
            let h1 = origin.h1_dir("acme", ty, v, os, arch);
            assert!(
                written.contains(&h1),
                "{ty} {os}_{arch}: {h1} missing:\n{written}"
            );
        }
    }
    // Running it again changes nothing.
    let again = provender(&args).await;
    again.ok();
    assert!(again.stdout.contains("unchanged"), "{}", again.stdout);

    // terraform init through provender, with that lock file, in a fresh directory.
    let mut mirror = TestMirror::start_on(&ca, &origin, &cache).await;
    let fresh = root_module(FOO_BAR_DIRS);
    std::fs::write(fresh.path().join(".terraform.lock.hcl"), &written).unwrap();
    let tf = Terraform::new(&ca, &tf_config::network_mirror(mirror.url.as_str()));
    tf.run(
        fresh.path(),
        &["init", "-input=false", "-no-color", "-lockfile=readonly"],
    )
    .await
    .assert_success();
    mirror.stop().await;

    // A constraint nothing meets: reported, nothing written, non-zero exit.
    let none = tempfile::tempdir().unwrap();
    let out = none.path().join("x.lock.hcl");
    let failed = provender(&[
        "lock",
        "--config",
        path_str(&cfg),
        "--platform",
        "linux_amd64",
        "--provider",
        "acme/foo@> 5.0",
        "--output",
        path_str(&out),
    ])
    .await;
    failed.fails(1);
    assert!(
        failed.out().contains("no version matches"),
        "{}",
        failed.out()
    );
    assert!(!out.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn exported_directory_works_from_a_plain_static_web_server() {
    let Connected {
        ca,
        origin,
        work,
        cfg,
        ..
    } = connected().await;
    let cfg = path_str(&cfg);
    let tf_dir = root_module(FOO_BAR_DIRS);
    let mut args = vec!["seed", "--config", cfg];
    let platform_args = platform_args("--platform");
    args.extend(platform_args.iter().map(String::as_str));
    args.push(path_str(tf_dir.path()));
    provender(&args).await.ok();
    let site = work.path().join("site");
    provender(&["export", "--config", cfg, path_str(&site)])
        .await
        .ok();
    origin.stop().await;

    let nginx = StaticServer::start(&ca, &site);
    let fresh = root_module(FOO_BAR_DIRS);
    let tf = Terraform::new(&ca, &tf_config::network_mirror(&nginx.url()));
    let init = tf.init(fresh.path()).await;
    assert!(
        init.status.success(),
        "terraform init from nginx failed:\n{}\n--- nginx error log ---\n{}",
        init.combined(),
        nginx.error_log()
    );
    let log = nginx.access_log();
    assert!(
        log.contains("/registry.terraform.io/acme/foo/index.json"),
        "{log}"
    );
    assert!(log.contains("terraform-provider-foo_1.1.0_"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_providers_mirror_directory_imports_and_serves_sealed() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let tf_dir = root_module(FOO_BAR_DIRS);
    let mirrored = work.path().join("tf-mirror");
    let direct = Terraform::new(&ca, &origin_cli_config(&origin));
    let mut args = vec!["providers", "mirror", "-no-color"];
    let tf_platforms = platform_args("-platform");
    args.extend(tf_platforms.iter().map(String::as_str));
    args.push(path_str(&mirrored));
    direct.run(tf_dir.path(), &args).await.assert_success();

    let cache = work.path().join("cache");
    let cfg = sealed_config(work.path(), "sealed.toml", &cache, &ca);
    let imported = import_unverified(path_str(&cfg), &mirrored).await;
    imported.ok();
    assert!(
        imported.stdout.contains(&format!(
            "trust levels: {} unverified",
            expected_zips().len()
        )),
        "{}",
        imported.stdout
    );
    assert_eq!(zips(&cache.join("archives")), expected_zips());
    assert!(!imported.out().contains("warning"), "{}", imported.out());

    // A cache that does not serve the providers' registry or platforms takes them, and says so.
    let elsewhere = work.path().join("elsewhere.toml");
    std::fs::write(
        &elsewhere,
        format!(
            "[cache]\ndir = \"{}\"\n\n[upstream]\nallowed_hosts = [\"registry.opentofu.org\"]\nplatforms = [\"windows_386\"]\noffline = true\n",
            work.path().join("elsewhere-cache").display()
        ),
    )
    .unwrap();
    let warned = import_unverified(path_str(&elsewhere), &mirrored).await;
    warned.ok();
    let (os, arch) = platforms()[0];
    for expected in [
        format!("warning: {REGISTRY} is not listed in upstream.allowed_hosts"),
        format!("warning: {os}_{arch} is not listed in upstream.platforms"),
    ] {
        assert!(warned.stderr.contains(&expected), "{}", warned.out());
    }

    init_from_sealed_cache(&ca, origin, &cache).await;

    // A zip changed after `providers mirror` wrote its hashes is refused, and nothing else from
    // that directory is admitted.
    let (os, arch) = &platforms()[0];
    let zip = mirrored
        .join(REGISTRY)
        .join("acme/bar")
        .join(format!("terraform-provider-bar_2.3.0_{os}_{arch}.zip"));
    let mut bytes = std::fs::read(&zip).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&zip, bytes).unwrap();
    let other = work.path().join("other-cache");
    let other_cfg = sealed_config(work.path(), "other.toml", &other, &ca);
    let refused = import_unverified(path_str(&other_cfg), &mirrored).await;
    refused.fails(1);
    assert!(
        refused.out().contains("terraform-provider-bar_2.3.0"),
        "{}",
        refused.out()
    );
    assert!(
        zips(&other).is_empty(),
        "nothing admitted: {:?}",
        zips(&other)
    );
    assert!(files_under(&other.join("metadata")).is_empty());
}

/// A change made to one entry of a bundle.
type Change = Box<dyn Fn(&mut Vec<u8>)>;

#[tokio::test(flavor = "multi_thread")]
async fn import_refuses_tampered_bundles_and_leaves_the_cache_alone() {
    let Connected {
        ca,
        origin,
        work,
        cfg,
        ..
    } = connected().await;
    let cfg = path_str(&cfg);
    seed(cfg, &["linux_amd64"], &["acme/foo@~> 1.0", "acme/bar"])
        .await
        .ok();
    let bundle = work.path().join("b.tar");
    export_bundle(cfg, &bundle).await;

    // The target cache already holds something, which must survive every refusal unchanged.
    let target = work.path().join("target");
    let target_cfg = config_file(work.path(), "target.toml", &target, origin.addr(), &ca, "");
    let target_cfg = path_str(&target_cfg);
    seed(target_cfg, &["linux_amd64"], &["acme/dirs"])
        .await
        .ok();
    let before = snapshot(&target);
    assert_eq!(zips(&target).len(), 1);

    let foo_zip = format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.1.0_linux_amd64.zip");
    let flip = |b: &mut Vec<u8>| {
        let mid = b.len() / 2;
        b[mid] ^= 0x01;
    };
    let foo_sha = origin.sha256_hex("acme", "foo", "1.1.0", "linux", "amd64");
    let cases: Vec<(&str, String, Change, &str)> = vec![
        (
            "changed archive",
            foo_zip.clone(),
            Box::new(flip),
            "SHA-256 is",
        ),
        (
            "changed manifest hash",
            "provender-bundle.json".to_string(),
            Box::new(move |b: &mut Vec<u8>| {
                let text = String::from_utf8(b.clone()).unwrap();
                let bad = format!("{}0", &foo_sha[..63]);
                let bad = if bad == foo_sha {
                    format!("{}1", &foo_sha[..63])
                } else {
                    bad
                };
                assert!(text.contains(&foo_sha));
                *b = text.replacen(&foo_sha, &bad, 1).into_bytes();
            }),
            "provender-bundle.json",
        ),
        (
            "changed mirror document",
            format!("{REGISTRY}/acme/bar/2.3.0.json"),
            Box::new(|b: &mut Vec<u8>| b.extend_from_slice(b" ")),
            "does not match the manifest",
        ),
    ];
    for (what, entry, change, expected) in cases {
        let tampered = work.path().join("tampered.tar");
        tamper(&bundle, &tampered, &entry, change);
        let refused = import(target_cfg, &tampered).await;
        refused.fails(1);
        assert!(
            refused.out().contains(expected),
            "{what}: {}",
            refused.out()
        );
        assert!(
            refused.stdout.contains("the cache is unchanged"),
            "{what}: {}",
            refused.stdout
        );
        let mut after = snapshot(&target);
        after.retain(|(p, _)| !p.starts_with(target.join("tmp")));
        assert_eq!(after, before, "{what}: the cache changed");
        assert!(
            files_under(&target.join("tmp")).is_empty(),
            "{what}: staging left behind"
        );
    }

    // The genuine bundle is admitted next to what was there.
    import(target_cfg, &bundle).await.ok();
    assert_eq!(zips(&target).len(), 3);
}

/// How many bytes the GNU long-name header slipped into a bundle declares (and holds, as a
/// hole in a sparse file).
const LONG_NAME_DECLARED: u64 = 256 << 20;

/// The most memory `import` may use while refusing that header (it peaks near 30 MiB; without
/// a bound on the header it reached 664 MiB).
const LONG_NAME_PEAK: u64 = 200 << 20;

/// A signed bundle with a 256 MiB long-name header slipped in before its archive: `import`
/// fails naming that header, admits nothing, and its peak memory stays well below the size.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn import_refuses_an_oversized_tar_header_without_reading_it() {
    use std::io::{Seek, SeekFrom, Write};
    let Connected {
        ca,
        origin,
        work,
        cfg,
        ..
    } = connected().await;
    let cfg = path_str(&cfg);
    seed(cfg, &["linux_amd64"], &["acme/bar@2.3.0"]).await.ok();
    let bundle = work.path().join("b.tar");
    export_bundle(cfg, &bundle).await;

    // The same bundle with a GNU long-name header of 256 MiB (zeros) before its archive.
    let bytes = std::fs::read(&bundle).unwrap();
    let mut archive = tar::Archive::new(&bytes[..]);
    let at = archive
        .entries()
        .unwrap()
        .map(Result::unwrap)
        .find(|e| e.path_bytes().ends_with(b".zip"))
        .map(|e| e.raw_header_position() as usize)
        .expect("an archive in the bundle");
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    header.set_entry_type(tar::EntryType::GNULongName);
    header.set_size(LONG_NAME_DECLARED);
    header.set_cksum();
    let hostile = work.path().join("hostile.tar");
    let mut out = std::fs::File::create(&hostile).unwrap();
    out.write_all(&bytes[..at]).unwrap();
    out.write_all(header.as_bytes()).unwrap();
    out.seek(SeekFrom::Current(LONG_NAME_DECLARED as i64))
        .unwrap();
    out.write_all(&bytes[at..]).unwrap();
    drop(out);
    let number = {
        let mut archive = tar::Archive::new(&bytes[..at]);
        archive.entries().unwrap().raw(true).count() + 1
    };

    let target = work.path().join("target");
    let target_cfg = config_file(work.path(), "target.toml", &target, origin.addr(), &ca, "");
    let (refused, peak) = provender_with_peak_memory(&[
        "import",
        "--config",
        path_str(&target_cfg),
        path_str(&hostile),
    ])
    .await;
    refused.fails(1);
    let expected = format!(
        "tar entry {number}: a GNU long-name header of {LONG_NAME_DECLARED} bytes, more than 65536"
    );
    assert!(refused.out().contains(&expected), "{}", refused.out());
    assert!(
        refused.stdout.contains("the cache is unchanged"),
        "{}",
        refused.stdout
    );
    assert!(
        peak < LONG_NAME_PEAK,
        "peak resident memory {} MiB",
        peak >> 20
    );
    assert!(
        zips(&target).is_empty(),
        "nothing admitted: {:?}",
        zips(&target)
    );
    assert!(files_under(&target.join("metadata")).is_empty());
    assert!(files_under(&target.join("tmp")).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_quarantines_a_damaged_archive() {
    let Connected {
        ca: _ca,
        origin: _origin,
        work: _work,
        cache,
        cfg,
    } = connected().await;
    let cfg = path_str(&cfg);
    seed(cfg, &["linux_amd64", "darwin_arm64"], &["acme/bar@2.3.0"])
        .await
        .ok();
    let clean = provender(&["verify", "--config", cfg]).await;
    clean.ok();
    assert!(clean.stdout.contains("2 archives"), "{}", clean.stdout);
    assert!(clean.stdout.contains("2 ok, 0 failed"), "{}", clean.stdout);

    let damaged = cache
        .join("archives")
        .join(REGISTRY)
        .join("acme/bar/2.3.0/terraform-provider-bar_2.3.0_darwin_arm64.zip");
    let mut bytes = std::fs::read(&damaged).unwrap();
    let last = bytes.len() - 30;
    bytes[last] ^= 0x01;
    std::fs::write(&damaged, bytes).unwrap();
    let found = provender(&["verify", "--config", cfg]).await;
    found.fails(1);
    assert!(found.stdout.contains("1 ok, 1 failed"), "{}", found.stdout);
    assert!(
        found.stdout.contains("darwin_arm64: SHA-256 is"),
        "{}",
        found.stdout
    );
    assert!(found.stdout.contains("quarantined to"), "{}", found.stdout);
    assert!(!damaged.exists());
    assert_eq!(
        zips(&cache.join("quarantine")).len(),
        0,
        "quarantined files keep a time suffix"
    );
    assert_eq!(
        files_under(&cache.join("quarantine")).len(),
        2,
        "zip and its record"
    );
    let ls = provender(&["ls", "--config", cfg]).await;
    ls.ok();
    assert!(!ls.stdout.contains("darwin_arm64"), "{}", ls.stdout);
    // Nothing failed twice: the next run is clean.
    provender(&["verify", "--config", cfg]).await.ok();

    // Usage mistakes are told apart from failures.
    let bad = provender(&[
        "seed",
        "--config",
        cfg,
        "--platform",
        "linux_amd64",
        "/nonexistent/dir",
    ])
    .await;
    bad.fails(78);
    assert!(bad.stderr.contains("/nonexistent/dir"), "{}", bad.stderr);
    let nothing = provender(&["lock", "--config", cfg, "--provider", "acme/bar"]).await;
    nothing.fails(78);
    assert!(nothing.stderr.contains("--platform"), "{}", nothing.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_and_import_hash_within_the_configured_zip_limits() {
    let Connected {
        ca,
        origin,
        work,
        cache,
        cfg,
    } = connected().await;
    let cfg = path_str(&cfg);
    // acme/dirs has three zip entries: `docs/`, `docs/README.md` and the executable.
    seed(cfg, &["linux_amd64"], &["acme/dirs"]).await.ok();
    let bundle = work.path().join("dirs.tar");
    export_bundle(cfg, &bundle).await;
    let limit = "max_zip_entries = 2";

    // The same cache under a configuration allowing two entries: the archive fails to hash.
    let strict = config_file(
        work.path(),
        "strict.toml",
        &cache,
        origin.addr(),
        &ca,
        limit,
    );
    let strict = path_str(&strict);
    let refused = provender(&["verify", "--config", strict, "--no-quarantine"]).await;
    refused.fails(1);
    assert!(
        refused.stdout.contains("more than the limit of 2"),
        "{}",
        refused.stdout
    );
    provender(&["verify", "--config", cfg]).await.ok();

    // Importing the bundle under that limit is refused too; under the defaults it is admitted.
    let target = work.path().join("target");
    let strict_target = config_file(work.path(), "t1.toml", &target, origin.addr(), &ca, limit);
    let refused = import(path_str(&strict_target), &bundle).await;
    refused.fails(1);
    assert!(
        refused.stdout.contains("more than the limit of 2"),
        "{}",
        refused.stdout
    );
    assert!(zips(&target).is_empty());
    let target_cfg = config_file(work.path(), "t2.toml", &target, origin.addr(), &ca, "");
    import(path_str(&target_cfg), &bundle).await.ok();
    assert_eq!(zips(&target).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn seed_and_lock_read_opentofu_configurations_as_opentofu_does() {
    const TOFU: &str = "registry.opentofu.org";
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[TOFU],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "2.0.0"], &[("linux", "amd64")]),
            ProviderSpec::new("hashicorp", "null", &["3.2.1"], &[("linux", "amd64")]),
        ],
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca(work.path());
    let cache = work.path().join("cache");
    let body = |tool: &str| {
        format!(
            "[cache]\ndir = \"{}\"\n\n[upstream]\nallowed_hosts = [\"{TOFU}\"]\nca_file = \"{}\"\n\n[upstream.hosts.\"{TOFU}\"]\nconnect_to = \"{}\"\n{tool}",
            cache.display(),
            ca_file.display(),
            origin.addr()
        )
    };
    let by_flag = work.path().join("flag.toml");
    std::fs::write(&by_flag, body("")).unwrap();
    let by_key = work.path().join("key.toml");
    std::fs::write(&by_key, body("\n[configurations]\ntool = \"opentofu\"\n")).unwrap();

    // main.tofu replaces main.tf; short sources mean registry.opentofu.org.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("main.tf"),
        "terraform {\n  required_providers {\n    foo = { source = \"acme/foo\", version = \"1.0.0\" }\n  }\n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("main.tofu"),
        "terraform {\n  required_providers {\n    foo = { source = \"acme/foo\", version = \"2.0.0\" }\n  }\n}\nresource \"null_resource\" \"x\" {}\n",
    )
    .unwrap();
    let seeded = provender(&[
        "seed",
        "--config",
        path_str(&by_flag),
        "--tool",
        "opentofu",
        path_str(dir.path()),
    ])
    .await;
    // The implied hashicorp/null is OpenTofu's: pinned to OpenTofu's key, which the fake
    // origin cannot sign with, so it is found and refused.
    seeded.fails(1);
    assert!(
        seeded
            .stdout
            .contains("registry.opentofu.org/acme/foo 2.0.0")
            && seeded.stdout.contains(
                "registry.opentofu.org/hashicorp/null must be signed by OpenTofu's pinned key"
            ),
        "{}",
        seeded.out()
    );
    // Read as Terraform (the default), the same directory names registry.terraform.io, which
    // this configuration does not serve.
    let as_terraform =
        provender(&["seed", "--config", path_str(&by_flag), path_str(dir.path())]).await;
    as_terraform.fails(1);
    assert!(
        as_terraform
            .out()
            .contains("registry.terraform.io/acme/foo"),
        "{}",
        as_terraform.out()
    );
    // configurations.tool does the same as --tool, for lock too.
    std::fs::write(
        dir.path().join("main.tofu"),
        "terraform {\n  required_providers {\n    foo = { source = \"acme/foo\", version = \"2.0.0\" }\n  }\n}\n",
    )
    .unwrap();
    let locked = provender(&[
        "lock",
        "--config",
        path_str(&by_key),
        "--platform",
        "linux_amd64",
        path_str(dir.path()),
    ])
    .await;
    locked.ok();
    let lock = std::fs::read_to_string(dir.path().join(".terraform.lock.hcl")).unwrap();
    assert!(
        lock.contains("provider \"registry.opentofu.org/acme/foo\"")
            && lock.contains("version     = \"2.0.0\""),
        "{lock}"
    );
}

/// A package named for another platform of its version (the origin's genuinely signed line for
/// that other file, relabelled): `seed` and `lock` refuse it, naming both files, and keep
/// nothing. A version record kept before that rule was enforced (a relabelled package already
/// in the cache, the other platform's archive stored under its name): `provender verify`
/// reports it and the archive, the server ignores it and fetches the version again (the
/// complete-hashes job then hashes the platform's own archive, not the relabelled one), and
/// the next `verify` quarantines the relabelled archive.
#[tokio::test(flavor = "multi_thread")]
async fn seed_lock_verify_and_the_hash_job_hold_packages_to_their_names() {
    let Connected {
        ca,
        origin,
        work,
        cache,
        cfg,
    } = connected().await;
    let cfg = path_str(&cfg);
    let own = origin.filename("acme", "bar", "2.3.0", "darwin", "arm64");
    let other = origin.filename("acme", "bar", "2.3.0", "linux", "amd64");
    let version_record = cache
        .join("metadata")
        .join(REGISTRY)
        .join("acme/bar/2.3.0.json");

    // Every platform's download metadata describes linux_amd64's file.
    origin.set_fault(Fault::DescribeAs {
        version: None,
        platform: Some(("linux", "amd64")),
    });
    let seeded = seed(cfg, &["darwin_arm64"], &["acme/bar@2.3.0"]).await;
    seeded.fails(1);
    let out = seeded.out();
    assert!(out.contains(&own) && out.contains(&other), "{out}");
    let locked_dir = work.path().join("locked");
    std::fs::create_dir(&locked_dir).unwrap();
    let lockfile = locked_dir.join(".terraform.lock.hcl");
    let locked = provender(&[
        "lock",
        "--config",
        cfg,
        "--platform",
        "darwin_arm64",
        "--provider",
        "acme/bar@2.3.0",
        "--output",
        path_str(&lockfile),
    ])
    .await;
    locked.fails(1);
    let out = locked.out();
    assert!(out.contains(&own) && out.contains(&other), "{out}");
    assert!(!lockfile.exists(), "no lock file from a refused package");
    assert!(!version_record.exists());
    assert!(zips(&cache).is_empty());
    assert_eq!(origin.count(RequestKind::Archive), 0);

    // A cache relabelled before the rule: darwin_arm64 named, summed and stored as linux_amd64.
    origin.clear_faults();
    seed(cfg, &["linux_amd64", "darwin_arm64"], &["acme/bar@2.3.0"])
        .await
        .ok();
    let archives = cache.join("archives").join(REGISTRY).join("acme/bar/2.3.0");
    std::fs::copy(archives.join(&other), archives.join(&own)).unwrap();
    std::fs::copy(
        archives.join(format!("{other}.json")),
        archives.join(format!("{own}.json")),
    )
    .unwrap();
    let mut rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&version_record).unwrap()).unwrap();
    rec["packages"]["darwin_arm64"] = rec["packages"]["linux_amd64"].clone();
    std::fs::write(&version_record, serde_json::to_vec(&rec).unwrap()).unwrap();

    let found = provender(&["verify", "--config", cfg, "--no-quarantine"]).await;
    found.fails(1);
    let out = found.stdout.clone();
    assert!(
        out.contains(&format!("version record {REGISTRY}/acme/bar 2.3.0"))
            && out.contains(&format!("named {other}, not {own}")),
        "{out}"
    );
    assert!(
        out.contains("darwin_arm64: its version record is unusable"),
        "{out}"
    );

    // The server fetches the version again instead of serving the relabelled record; the job
    // hashes darwin_arm64's own archive.
    let mut mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            cache_dir: Some(&cache),
            hash_job: Some(""),
            ..Default::default()
        },
    )
    .await;
    let client = crate::support::https_client(&ca, &[]);
    let url = mirror.url(&format!("{REGISTRY}/acme/bar/2.3.0.json"));
    let own_zh = format!(
        "zh:{}",
        origin.sha256_hex("acme", "bar", "2.3.0", "darwin", "arm64")
    );
    let own_h1 = origin.h1_zip("acme", "bar", "2.3.0", "darwin", "arm64");
    let doc = crate::support::poll(std::time::Duration::from_secs(20), async || {
        let got = crate::support::http::get(&client, &url).await;
        assert_eq!(got.status, 200, "{url}");
        let doc = got.json();
        let hashes = doc["archives"]["darwin_arm64"]["hashes"].clone();
        assert!(
            hashes.as_array().unwrap().contains(&own_zh.clone().into()),
            "{hashes}"
        );
        crate::support::h1_of(&doc, "darwin_arm64").map(|h1| (h1, doc))
    })
    .await
    .expect("darwin_arm64 hashed");
    assert_eq!(doc.0, own_h1, "{}", doc.1);
    mirror.stop().await;

    // The relabelled archive fails against the record fetched again, and leaves the store.
    let again = provender(&["verify", "--config", cfg]).await;
    again.fails(1);
    assert!(again.stdout.contains("quarantined to"), "{}", again.stdout);
    provender(&["verify", "--config", cfg]).await.ok();
}
