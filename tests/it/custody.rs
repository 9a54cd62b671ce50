//! What `import` admits, and trust levels everywhere:
//! - a bundle signed by a trusted site is admitted; an unsigned one, or one signed by a key not
//!   in `bundles.trusted_keys`, only with `--allow-unverified`; one whose manifest changed
//!   after it was signed never;
//! - a hand-made mirror directory passing off made-up content as HashiCorp's AWS provider is
//!   never admitted; other directories only with `--allow-unverified`, recorded `unverified`;
//! - a bundle from an origin that lists no signing keys follows `upstream.require_signature`
//!   exactly as `serve` does;
//! - `upstream.min_trust` refuses what is below it in `serve` (a JSON error naming the rule),
//!   `seed`, `lock` and `import`;
//! - `ls` / `ls --json` show each archive's level, `/metrics` counts responses by level.

use std::io::Write as _;
use std::path::Path;

use crate::support::cli::{
    config_file, export_bundle, import, import_unverified, path_str, provender, seed, snapshot,
    tamper, zips,
};
use crate::support::http::get;
use crate::support::origin::{FakeOrigin, Fault, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::{https_client, sample};

async fn origin(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0"], &[("linux", "amd64")]),
            ProviderSpec::new("acme", "bar", &["2.0.0"], &[("linux", "amd64")]),
        ],
    )
    .await
}

/// A configuration file like [`config_file`] but without the shared site key: `bundles` is
/// given here (or left out).
fn config_with_bundles(
    dir: &Path,
    name: &str,
    origin: &FakeOrigin,
    ca: &TestCa,
    upstream: &str,
    bundles: &str,
) -> std::path::PathBuf {
    let ca_file = ca.write_ca(dir);
    let path = dir.join(name);
    let cache = dir.join(format!("{name}.cache"));
    std::fs::write(
        &path,
        format!(
            "[cache]\ndir = \"{}\"\n\n[upstream]\nallowed_hosts = [\"{REGISTRY}\"]\nca_file = \"{}\"\n{upstream}\n\n[upstream.hosts.\"{REGISTRY}\"]\nconnect_to = \"{}\"\n\n[bundles]\n{bundles}\n",
            cache.display(),
            ca_file.display(),
            origin.addr()
        ),
    )
    .unwrap();
    path
}

fn cache_of(cfg: &Path) -> std::path::PathBuf {
    let mut s = cfg.as_os_str().to_owned();
    s.push(".cache");
    s.into()
}

#[tokio::test(flavor = "multi_thread")]
async fn bundles_are_admitted_on_a_trusted_sites_word_only() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    // The exporting site signs with the key shared by config_file's configurations.
    let source = config_file(
        dir,
        "source.toml",
        &dir.join("source"),
        origin.addr(),
        &ca,
        "",
    );
    let source = path_str(&source);
    seed(source, &["linux_amd64"], &["acme/foo", "acme/bar"])
        .await
        .ok();
    let signed = dir.join("signed.tar");
    export_bundle(source, &signed).await;
    let unsigned = dir.join("unsigned.tar");
    let plain = config_with_bundles(dir, "plain.toml", &origin, &ca, "", "");
    let cache_plain_src = cache_of(&plain);
    std::fs::create_dir_all(&cache_plain_src).unwrap();
    // The same cache exported without a key: copy the source cache under plain.toml's dir.
    copy_dir(&dir.join("source"), &cache_plain_src);
    let out = provender(&[
        "export",
        "--config",
        path_str(&plain),
        "--bundle",
        path_str(&unsigned),
    ])
    .await;
    out.ok();
    assert!(
        out.stderr.contains("the bundle is unsigned"),
        "{}",
        out.out()
    );

    // A site that trusts another key.
    let (_, stranger) = {
        let other = tempfile::tempdir().unwrap();
        let pair = crate::support::cli::site_key(other.path());
        (other, pair.1)
    };
    let suspicious = config_with_bundles(
        dir,
        "suspicious.toml",
        &origin,
        &ca,
        "offline = true",
        &format!("trusted_keys = [\"{stranger}\"]"),
    );
    let suspicious = path_str(&suspicious);
    for (bundle, why) in [
        (&signed, "which is not in bundles.trusted_keys"),
        (&unsigned, "the bundle is not signed"),
    ] {
        let refused = import(suspicious, bundle).await;
        refused.fails(1);
        for expected in [why, "--allow-unverified", "the cache is unchanged"] {
            assert!(refused.out().contains(expected), "{}", refused.out());
        }
        assert!(zips(&cache_of(Path::new(suspicious))).is_empty());
    }

    // A manifest changed after signing is refused even with --allow-unverified.
    let trusting = config_file(
        dir,
        "trusting.toml",
        &dir.join("trusting"),
        origin.addr(),
        &ca,
        "",
    );
    let trusting = path_str(&trusting);
    let altered = dir.join("altered.tar");
    tamper(&signed, &altered, "provender-bundle.json", |b| {
        let text = String::from_utf8(b.clone()).unwrap();
        *b = text
            .replacen("\"created_at\": ", "\"created_at\": 1", 1)
            .into_bytes();
    });
    for run in [
        import(trusting, &altered).await,
        import_unverified(trusting, &altered).await,
    ] {
        run.fails(1);
        assert!(
            run.out()
                .contains("does not verify: the bundle was altered"),
            "{}",
            run.out()
        );
    }
    assert!(zips(&dir.join("trusting")).is_empty());

    // The signed bundle is admitted where its site is trusted, with the origin's level.
    let admitted = import(trusting, &signed).await;
    admitted.ok();
    assert!(
        admitted.stdout.contains("signed by trusted site key")
            && admitted.stdout.contains("trust levels: 2 community"),
        "{}",
        admitted.stdout
    );
    // The unsigned one only on the operator's say-so; the origin's signature still classifies it.
    let taken = import_unverified(suspicious, &unsigned).await;
    taken.ok();
    assert!(
        taken.stdout.contains("trust levels: 2 community"),
        "{}",
        taken.stdout
    );
}

/// Copies a directory tree.
fn copy_dir(from: &Path, to: &Path) {
    for entry in walk(from) {
        let rel = entry.strip_prefix(from).unwrap();
        let target = to.join(rel);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &target).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    crate::support::provender::files_under(dir)
}

/// A zip holding one file, its `h1:` and its SHA-256.
fn made_up_zip(name: &str, content: &[u8]) -> (Vec<u8>, String, String) {
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut buf);
        zip.start_file(name, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(content).unwrap();
        zip.finish().unwrap();
    }
    let bytes = buf.into_inner();
    let h1 = provender::hash::h1_zip(
        std::io::Cursor::new(&bytes),
        provender::hash::HashLimits::default(),
    )
    .unwrap()
    .to_string();
    let sha = provender::hash::sha256_hex(&bytes);
    (bytes, h1, sha)
}

/// Writes a `terraform providers mirror` directory for one archive with matching hashes.
fn hand_made_mirror(root: &Path, host: &str, ns: &str, ty: &str, version: &str) {
    let dir = root.join(host).join(ns).join(ty);
    std::fs::create_dir_all(&dir).unwrap();
    let file = format!("terraform-provider-{ty}_{version}_linux_amd64.zip");
    let (zip, h1, sha) = made_up_zip(
        &format!("terraform-provider-{ty}_v{version}"),
        b"#!/bin/sh\necho not what it claims to be\n",
    );
    std::fs::write(dir.join(&file), zip).unwrap();
    std::fs::write(
        dir.join("index.json"),
        format!("{{\"versions\":{{\"{version}\":{{}}}}}}"),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{version}.json")),
        format!(
            "{{\"archives\":{{\"linux_amd64\":{{\"url\":\"{file}\",\"hashes\":[\"{h1}\",\"zh:{sha}\"]}}}}}}"
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_directory_never_passes_for_hashicorps_provider() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let cfg = config_file(
        dir,
        "sealed.toml",
        &dir.join("cache"),
        origin.addr(),
        &ca,
        "offline = true",
    );
    let cfg = path_str(&cfg);

    let fake_aws = dir.join("fake-aws");
    hand_made_mirror(
        &fake_aws,
        "registry.terraform.io",
        "hashicorp",
        "aws",
        "5.0.0",
    );
    for run in [
        import(cfg, &fake_aws).await,
        import_unverified(cfg, &fake_aws).await,
    ] {
        run.fails(1);
        assert!(
            run.stdout.contains("the cache is unchanged"),
            "{}",
            run.out()
        );
    }
    let refused = import_unverified(cfg, &fake_aws).await;
    assert!(
        refused
            .out()
            .contains("is pinned to HashiCorp's key: only archives signed with it are admitted"),
        "{}",
        refused.out()
    );
    assert!(zips(&dir.join("cache")).is_empty());

    // Another provider's directory: only with the flag, and recorded as unverified.
    let other = dir.join("other");
    hand_made_mirror(&other, "registry.terraform.io", "acme", "foo", "9.9.9");
    let refused = import(cfg, &other).await;
    refused.fails(1);
    assert!(
        refused.out().contains("--allow-unverified"),
        "{}",
        refused.out()
    );
    let taken = import_unverified(cfg, &other).await;
    taken.ok();
    assert!(
        taken.stdout.contains("trust levels: 1 unverified"),
        "{}",
        taken.stdout
    );
    let ls = provender(&["ls", "--config", cfg]).await;
    ls.ok();
    assert!(ls.stdout.contains("TRUST"), "{}", ls.stdout);
    assert!(ls.stdout.contains("unverified"), "{}", ls.stdout);
    let json = provender(&["ls", "--config", cfg, "--json"]).await;
    json.ok();
    let rows: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(rows[0]["trust"], "unverified", "{rows}");

    // Served as such, and counted by level.
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "offline = true",
            cache_dir: Some(&dir.join("cache")),
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let got = get(
        &client,
        &mirror.url(&format!(
            "{REGISTRY}/acme/foo/terraform-provider-foo_9.9.9_linux_amd64.zip"
        )),
    )
    .await;
    assert_eq!(got.status, 200);
    let m = mirror.metrics(&client).await;
    assert_eq!(
        sample(
            &m,
            r#"provender_archive_responses_total{trust="unverified"}"#
        ),
        1,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unsigned_origins_follow_require_signature_on_import_as_on_serve() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    origin.set_fault(Fault::NoSigningKeys);
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let lenient = "require_signature = false";
    let source = config_file(
        dir,
        "source.toml",
        &dir.join("source"),
        origin.addr(),
        &ca,
        lenient,
    );
    let source = path_str(&source);
    seed(source, &["linux_amd64"], &["acme/foo"]).await.ok();
    let bundle = dir.join("unsigned-origin.tar");
    export_bundle(source, &bundle).await;

    // The default policy refuses what the origin did not sign, even from a trusted site.
    let strict = config_file(
        dir,
        "strict.toml",
        &dir.join("strict"),
        origin.addr(),
        &ca,
        "offline = true",
    );
    let strict = path_str(&strict);
    let before = snapshot(&dir.join("strict"));
    let refused = import(strict, &bundle).await;
    refused.fails(1);
    assert!(
        refused.out().contains("upstream.require_signature"),
        "{}",
        refused.out()
    );
    assert_eq!(snapshot(&dir.join("strict")), before);

    // Where the policy allows it, the trusted site's word makes it `unsigned`.
    let relaxed = config_file(
        dir,
        "relaxed.toml",
        &dir.join("relaxed"),
        origin.addr(),
        &ca,
        "offline = true\nrequire_signature = false",
    );
    let taken = import(path_str(&relaxed), &bundle).await;
    taken.ok();
    assert!(
        taken.stdout.contains("trust levels: 1 unsigned"),
        "{}",
        taken.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn min_trust_refuses_below_it_in_serve_seed_lock_and_import() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let picky = "min_trust = \"partner\"";

    // serve: the fake origin's key is a community key.
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: picky,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let got = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json")),
    )
    .await;
    assert_eq!(got.status, 410, "{}", got.text());
    assert_eq!(got.code(), "policy_refused");
    assert!(
        got.message().contains("upstream.min_trust"),
        "{}",
        got.text()
    );
    let got = get(
        &client,
        &mirror.url(&format!(
            "{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip"
        )),
    )
    .await;
    assert_eq!(got.status, 410, "{}", got.text());
    let m = mirror.metrics(&client).await;
    assert!(
        sample(&m, r#"provender_policy_refusals_total{rule="min_trust"}"#) >= 2,
        "{m}"
    );

    // seed and lock
    let cfg = config_file(
        dir,
        "picky.toml",
        &dir.join("picky"),
        origin.addr(),
        &ca,
        picky,
    );
    let cfg = path_str(&cfg);
    let seeded = seed(cfg, &["linux_amd64"], &["acme/foo"]).await;
    seeded.fails(1);
    assert!(
        seeded.out().contains("upstream.min_trust"),
        "{}",
        seeded.out()
    );
    assert!(zips(&dir.join("picky")).is_empty());
    let out = dir.join("x.lock.hcl");
    let locked = provender(&[
        "lock",
        "--config",
        cfg,
        "--platform",
        "linux_amd64",
        "--provider",
        "acme/foo",
        "--output",
        path_str(&out),
    ])
    .await;
    locked.fails(1);
    assert!(
        locked.out().contains("upstream.min_trust"),
        "{}",
        locked.out()
    );

    // import
    let source = config_file(
        dir,
        "source.toml",
        &dir.join("source"),
        origin.addr(),
        &ca,
        "",
    );
    let source = path_str(&source);
    seed(source, &["linux_amd64"], &["acme/foo"]).await.ok();
    let bundle = dir.join("b.tar");
    export_bundle(source, &bundle).await;
    let refused = import(cfg, &bundle).await;
    refused.fails(1);
    assert!(
        refused.out().contains("upstream.min_trust"),
        "{}",
        refused.out()
    );
    assert!(zips(&dir.join("picky")).is_empty());

    // The same cache, once the policy allows community providers, serves what it has.
    let seeded = seed(source, &["linux_amd64"], &["acme/bar"]).await;
    seeded.ok();
    let ls = provender(&["ls", "--config", source]).await;
    assert!(ls.stdout.contains("community"), "{}", ls.stdout);
}

/// `trust` of each cached module version, by `module@version`, from `ls --json`.
async fn module_trust(cfg: &str) -> Vec<(String, String)> {
    crate::support::cli::listed_modules(cfg)
        .await
        .into_iter()
        .map(|(shown, row)| (shown, row["trust"].as_str().unwrap_or_default().into()))
        .collect()
}

/// Module packages carry no signature; what they carry is how they came in: fetched from the
/// origin, imported from a trusted site's signed bundle, or imported unverified. `ls` shows
/// it, and `upstream.min_trust` refuses unverified ones in serve and import.
#[tokio::test(flavor = "multi_thread")]
async fn module_packages_record_how_they_were_obtained() {
    use crate::support::origin::ModuleSpec;
    let ca = TestCa::new();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        Vec::new(),
        vec![ModuleSpec::new("acme", "net", "test", &["1.0.0"])],
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let source = config_file(
        dir,
        "source.toml",
        &dir.join("source"),
        origin.addr(),
        &ca,
        "",
    );
    let source = path_str(&source);
    provender(&[
        "seed",
        "--config",
        source,
        "--module",
        "acme/net/test@1.0.0",
    ])
    .await
    .ok();
    let module = format!("{REGISTRY}/acme/net/test@1.0.0");
    assert_eq!(
        module_trust(source).await,
        [(module.clone(), "origin".into())]
    );

    // A signed bundle, imported where its site is trusted.
    let signed = dir.join("signed.tar");
    export_bundle(source, &signed).await;
    let trusting = config_file(
        dir,
        "trusting.toml",
        &dir.join("trusting"),
        origin.addr(),
        &ca,
        "",
    );
    let trusting = path_str(&trusting);
    import(trusting, &signed).await.ok();
    assert_eq!(
        module_trust(trusting).await,
        [(module.clone(), "signed_bundle".into())]
    );

    // The same bundle where its key is not trusted: only with --allow-unverified, as such.
    let stranger = config_with_bundles(dir, "stranger.toml", &origin, &ca, "offline = true", "");
    let stranger = path_str(&stranger);
    import(stranger, &signed).await.fails(1);
    import_unverified(stranger, &signed).await.ok();
    assert_eq!(
        module_trust(stranger).await,
        [(module.clone(), "unverified".into())]
    );

    // min_trust refuses it in serve (a JSON error naming the rule), and in import.
    let client = https_client(&ca, &[]);
    let download = format!("v1/modules/{REGISTRY}/acme/net/test/1.0.0/download");
    let package = format!("v1/modules/{REGISTRY}/acme/net/test/1.0.0/module.tar.gz");
    for (extra, status) in [
        ("offline = true", 200),
        ("offline = true\nmin_trust = \"community\"", 410),
    ] {
        let mirror = TestMirror::start_with(
            &ca,
            &origin,
            MirrorOptions {
                cache_dir: Some(&cache_of(Path::new(stranger))),
                extra_upstream: extra,
                ..Default::default()
            },
        )
        .await;
        for path in [&download, &package] {
            let got = get(&client, &mirror.url(path)).await;
            assert_eq!(got.status, status, "{extra}: {path}: {}", got.text());
            if status == 410 {
                assert_eq!(got.code(), "policy_refused");
                assert!(
                    got.message().contains("upstream.min_trust"),
                    "{}",
                    got.text()
                );
            }
        }
    }
    let picky = config_with_bundles(
        dir,
        "picky.toml",
        &origin,
        &ca,
        "offline = true\nmin_trust = \"unsigned\"",
        "",
    );
    let refused = import_unverified(path_str(&picky), &signed).await;
    refused.fails(1);
    assert!(
        refused.out().contains("upstream.min_trust"),
        "{}",
        refused.out()
    );
    assert!(module_trust(path_str(&picky)).await.is_empty());
}

/// A bundle from a site whose cache was poisoned: version 2.0.0 of a provider holding 1.0.0's
/// genuinely signed files. The relabelled version record never leaves the site (export reads
/// records as every reader does, under the filename rule), so the bundle's 2.0.0 zip comes with
/// no signature that covers it, and import admits none of it.
#[tokio::test(flavor = "multi_thread")]
async fn import_refuses_another_versions_signed_files() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let source_cache = dir.join("source");
    let source = config_file(dir, "source.toml", &source_cache, origin.addr(), &ca, "");
    let source = path_str(&source);
    seed(source, &["linux_amd64"], &["acme/foo"]).await.ok();
    // Every cached file of 1.0.0 again under 2.0.0's name, its content unchanged.
    for path in walk(&source_cache) {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = path.to_string_lossy().into_owned();
        if text.contains("1.0.0") {
            let copy = std::path::PathBuf::from(text.replace("1.0.0", "2.0.0"));
            std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
            std::fs::copy(&path, copy).unwrap();
        }
        if name == "index.json" {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace("\"1.0.0\"", "\"1.0.0\",\"2.0.0\"")).unwrap();
        }
    }
    let bundle = dir.join("poisoned.tar");
    export_bundle(source, &bundle).await;
    let target = config_file(
        dir,
        "target.toml",
        &dir.join("target"),
        origin.addr(),
        &ca,
        "",
    );
    let run = import(path_str(&target), &bundle).await;
    run.fails(1);
    let out = run.out();
    assert!(
        out.contains("terraform-provider-foo_2.0.0_linux_amd64.zip: no origin signature covers it"),
        "{out}"
    );
    assert!(out.contains("nothing imported"), "{out}");
    assert!(zips(&dir.join("target")).is_empty());
}
